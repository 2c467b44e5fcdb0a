#!/usr/bin/env python3
"""Writes the string literals of kiln's tests (raw strings, and runs of adjacent ordinary
literals joined as the compiler joins them) into a directory, one file each, as raw seed
inputs for a fuzz target. Data files given as FILE are copied as they are.
Usage: test_literals.py OUT_DIR SOURCE_OR_DATA_FILE..."""
import hashlib
import pathlib
import re
import sys

RAW = re.compile(r'R"([^()\\\s]{0,16})\((.*?)\)\1"', re.S)
ORDINARY = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}


def unescape(body):
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m.group(1), m.group(0)), body)


def literals(source):
    for match in RAW.finditer(source):
        yield match.group(2)
    source = RAW.sub('""', source)
    # Adjacent literals separated only by whitespace form one string.
    run, end = [], None
    for match in ORDINARY.finditer(source):
        if run and source[end:match.start()].strip():
            yield "".join(run)
            run = []
        run.append(unescape(match.group(1)))
        end = match.end()
    if run:
        yield "".join(run)


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:]:
        path = pathlib.Path(name)
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found = [text] if path.suffix != ".cpp" else [s for s in literals(text) if len(s) >= 4]
        for seed in found:
            data = seed.encode()
            (out / hashlib.sha1(data).hexdigest()).write_bytes(data)


if __name__ == "__main__":
    main()
