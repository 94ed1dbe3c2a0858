#!/usr/bin/env python3
"""trafilatura over HTML files, as its own evaluation runs it: `trafilatura.extract` with
defaults on each file's bytes (trafilatura decodes them itself).

  run.py [--print] FILE...   one process, every file in order; --print writes one JSON line
                             {"file", "text"} per file (text "" when trafilatura returns None).
Installed by bench/run into a virtualenv from bench/trafilatura/requirements.txt (pinned).
"""

import json
import sys

import trafilatura


def main(argv):
    show = argv[:1] == ["--print"]
    for path in argv[1:] if show else argv:
        with open(path, "rb") as f:
            text = trafilatura.extract(f.read()) or ""
        if show:
            print(json.dumps({"file": path, "text": text}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
