#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from testdata/http1/*.toml (each case's request bytes).

Usage: python3 fuzz/seed_corpus.py
"""
import glob, hashlib, os, tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
for target in ("http_session", "http_split"):
    out = os.path.join(HERE, "corpus", target)
    os.makedirs(out, exist_ok=True)
    for path in glob.glob(os.path.join(HERE, "..", "testdata", "http1", "*.toml")):
        with open(path, "rb") as f:
            cases = tomllib.load(f).get("case", [])
        for case in cases:
            if "request" in case:
                data = case["request"].encode("utf-8", "surrogateescape")
            elif "request_hex" in case:
                lines = [l.split("#")[0] for l in case["request_hex"].splitlines()]
                data = bytes.fromhex("".join(lines))
            else:
                continue
            if target == "http_split":
                data = bytes([85, 170]) + data
            name = hashlib.sha1(data).hexdigest()
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
    print(target, len(os.listdir(out)), "seeds")
