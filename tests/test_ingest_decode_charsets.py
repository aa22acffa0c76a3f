"""Legacy encodings of tool output: charset-normalizer's guess is taken for the scripts a Western code page
turns to mojibake, and Windows-1252 stays the reading of Latin text (its guesses among Latin pages are not)."""

from __future__ import annotations

import pytest

from windowsmith.ingest.decode import decode_text

pytest.importorskip("charset_normalizer")

CASES = [
    ("ログファイルを読み込みました。エラーは三件です。設定ファイルの場所を確認してください。", "shift_jis"),
    ("日志文件已读取。共有三个错误。请检查配置文件的位置。", "gb18030"),
    ("Файл журнала прочитан. Обнаружено три ошибки. Проверьте расположение файла конфигурации.", "koi8_r"),
    ("Привет, мир! Это тестовая строка на русском языке.", "cp1251"),
    ("Caf\xe9 \u2013 r\xe9sum\xe9 \u201cquoted\u201d na\xefve fa\xe7ade; Gr\xf6\xdfe \xfcber", "cp1252"),
    ("Ça va? Él está aquí. Größe", "latin-1"),
    ("caf\xe9", "latin-1"),
]


@pytest.mark.parametrize(("text", "encoding"), CASES, ids=[e for _, e in CASES])
def test_legacy_encodings_decode_to_their_text(text: str, encoding: str) -> None:
    assert decode_text(text.encode(encoding)) == text


def test_utf8_and_binary_are_unchanged() -> None:
    assert decode_text("naïve ログ".encode()) == "naïve ログ"
    assert decode_text(b"\x89PNG\r\n\x1a\n" + bytes(range(256))) is None
