# windowsmith serve as a container: slim, non-root, configured through WINDOWSMITH_* variables.
#
#   docker build -t windowsmith .
#   docker run -p 8750:8750 -e WINDOWSMITH_STORE=postgresql://app@db/windowsmith \
#       -e WINDOWSMITH_OPENAI_BASE_URL=https://api.openai.com/v1 windowsmith
#
# Every `windowsmith serve` option has a variable: WINDOWSMITH_ and the option in capitals (WINDOWSMITH_PORT,
# WINDOWSMITH_DEFAULT_WINDOW, WINDOWSMITH_LOG_FORMAT=json, WINDOWSMITH_TOKENS=token=tenant,...). SIGTERM stops
# the server gracefully: calls in flight finish (up to 30 s), new ones are refused.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir --prefix=/install ".[server,postgres,s3,gemini]"

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/windowsmith --create-home windowsmith
COPY --from=build /install /usr/local
USER windowsmith
WORKDIR /var/lib/windowsmith
ENV PYTHONUNBUFFERED=1 \
    WINDOWSMITH_HOST=0.0.0.0 \
    WINDOWSMITH_PORT=8750 \
    WINDOWSMITH_STORE=/var/lib/windowsmith/windowsmith.db \
    WINDOWSMITH_LOG_FORMAT=json
EXPOSE 8750
HEALTHCHECK --interval=30s --timeout=3s CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8750/healthz').status != 200)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["windowsmith", "serve"]
