"""Where the server keeps offloaded tool results: in the store (the default), or in an object store shared by every
host (``serve --artifacts s3://bucket/prefix``, through obstore; credentials, region and endpoint from the usual
``AWS_*`` variables), or in a folder (``--artifacts file:///path``). Each tenant's blobs live under their own
prefix (``<prefix>/tenants/<tenant>/``), so one tenant's references never reach another's.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from ..artifacts import ArtifactStore, FileArtifacts, ObjectArtifacts
from ..errors import UsageError

#: the sha256 of no blob: reading it tells whether the artifact store answers at all
PROBE_SHA = "0" * 64


def tenant_prefix(prefix: str, tenant: str | None) -> str:
    return "/".join(p for p in (prefix.strip("/"), "tenants", tenant or "_default") if p)


def open_artifacts(url: str, tenant: str | None) -> ArtifactStore:
    """The artifact store ``url`` names, as ``tenant`` sees it."""
    u = urlparse(url)
    if u.scheme == "s3" and u.netloc:
        try:
            from obstore.store import S3Store
        except ImportError:
            raise UsageError("--artifacts s3://... needs obstore: pip install 'windowsmith[s3]'") from None
        return ObjectArtifacts(S3Store(u.netloc), prefix=tenant_prefix(u.path, tenant))
    if u.scheme == "file" and u.path:
        return FileArtifacts(Path(u.path) / tenant_prefix("", tenant))
    raise UsageError(f"--artifacts {url!r} is not an artifact store URL: use s3://bucket[/prefix] (an S3-compatible "
                     "object store; set AWS_ENDPOINT_URL for one that is not AWS) or file:///a/folder")


def check_reachable(store: ArtifactStore) -> None:
    """Raise unless ``store`` answers a read (a missing blob is an answer)."""
    store.get(PROBE_SHA)


__all__ = ["check_reachable", "open_artifacts", "tenant_prefix"]
