#!/usr/bin/env python3
"""Main-text extraction quality on the Mozilla Readability test corpus.

Scores texts against each page's expected.html (the content Readability.js keeps) with the
ScrapingHub article-extraction-benchmark measure: word tokens (lowercased \\w+ runs), 4-token
shingles counted as multisets, precision / recall / F1 per page, averaged over pages. Also
reports title and excerpt agreement with expected-metadata.json.

Two sources of texts:
  --bin PATH      run `PATH extract --max-text-chars 0 --url URL FILE` on every page (the service's
                  own extractor, exactly as VM01 runs it);
  --jsonl FILE    lines {extractor, page, text} written by bench/extract-compare.

--floor F fails (exit 1) when the mean F1 of --bin is below F. The corpus is read in place and
never copied.
"""

import argparse
import collections
import concurrent.futures
import html.parser
import json
import os
import re
import subprocess
import sys
import time

DEFAULT_CORPUS = "/work/shared/corpus/mozilla-readability"
TOKEN = re.compile(r"\w+", re.UNICODE)


class _Text(html.parser.HTMLParser):
    """Collects the text of an HTML fragment (stdlib parser; script/style skipped)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self.skip:
            self.skip -= 1

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def html_text(markup):
    parser = _Text()
    parser.feed(markup)
    parser.close()
    return " ".join(parser.parts)


def shingles(text, n=4):
    tokens = TOKEN.findall(text.lower())
    if len(tokens) < n:
        return collections.Counter([tuple(tokens)] if tokens else [])
    return collections.Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def prf(predicted, expected):
    """Precision, recall, F1 of two texts over 4-token shingle multisets."""
    a, b = shingles(predicted), shingles(expected)
    if not a and not b:
        return 1.0, 1.0, 1.0
    if not a or not b:
        return 0.0, 0.0, 0.0
    common = sum((a & b).values())
    p, r = common / sum(a.values()), common / sum(b.values())
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def norm(value):
    return " ".join((value or "").split()).casefold()


def load_corpus(root):
    pages = {}
    base = os.path.join(root, "test-pages")
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        source = os.path.join(folder, "source.html")
        if not os.path.isfile(source):
            continue
        with open(os.path.join(folder, "expected.html"), encoding="utf-8") as f:
            expected = html_text(f.read())
        with open(os.path.join(folder, "expected-metadata.json"), encoding="utf-8") as f:
            metadata = json.load(f)
        pages[name] = {"source": source, "expected": expected, "metadata": metadata}
    return pages


def run_bin(binary, name, page):
    # The corpus pages were captured from http://fakehost/test/ (Readability's test harness),
    # and are stored as UTF-8 whatever their <meta charset> says, so the charset is given.
    command = [binary, "extract", "--max-text-chars", "0", "--url", "http://fakehost/test/",
               "--content-type", "text/html; charset=utf-8", page["source"]]
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name}: factomat extract failed: {done.stderr.decode(errors='replace')}")
    result = json.loads(done.stdout)
    return {
        "text": result["content"]["text"],
        "title": result["metadata"]["title"],
        "description": result["metadata"]["description"],
    }


def summarize(label, pages, outputs, worst=0):
    scores = []
    title_exact = title_contains = titled = 0
    excerpt_exact = excerpted = 0
    for name, page in pages.items():
        out = outputs.get(name)
        if out is None:
            continue
        p, r, f = prf(out["text"], page["expected"])
        scores.append((f, p, r, name))
        expected_title = norm(page["metadata"].get("title"))
        if expected_title and "title" in out:
            titled += 1
            got = norm(out["title"])
            title_exact += got == expected_title
            title_contains += bool(got) and (expected_title in got or got in expected_title)
        expected_excerpt = norm(page["metadata"].get("excerpt"))
        # Readability falls back to the first paragraph when a page declares no description;
        # we report only declared descriptions, so agreement is measured where we found one.
        if expected_excerpt and out.get("description"):
            excerpted += 1
            excerpt_exact += norm(out["description"]) == expected_excerpt
    n = len(scores)
    mean = lambda i: sum(s[i] for s in scores) / n if n else 0.0
    line = f"{label}: pages {n}  F1 {mean(0):.3f}  precision {mean(1):.3f}  recall {mean(2):.3f}"
    if titled:
        line += f"  title exact {title_exact / titled:.3f} contained {title_contains / titled:.3f}"
    if excerpted:
        line += f"  excerpt=description {excerpt_exact / excerpted:.3f}"
    print(line)
    for f, p, r, name in sorted(scores)[:worst]:
        print(f"    {name}: F1 {f:.3f} P {p:.3f} R {r:.3f}")
    return mean(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=os.environ.get("FACTOMAT_CORPUS", DEFAULT_CORPUS))
    parser.add_argument("--bin", help="factomat binary to run `extract` with")
    parser.add_argument("--jsonl", help="texts written by bench/extract-compare")
    parser.add_argument("--floor", type=float, help="fail when the mean F1 of --bin is below this")
    parser.add_argument("--worst", type=int, default=0, help="list the N worst pages")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.corpus, "test-pages")):
        print(f"corpus not found at {args.corpus}; set FACTOMAT_CORPUS", file=sys.stderr)
        return 2
    pages = load_corpus(args.corpus)
    status = 0
    if args.jsonl:
        by_extractor = collections.defaultdict(dict)
        speed = {}
        with open(args.jsonl, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                by_extractor[row["extractor"]][row["page"]] = {"text": row["text"]}
                speed[row["extractor"]] = row.get("pages_per_second")
        for extractor, outputs in by_extractor.items():
            label = f"{extractor} ({speed[extractor]:.1f} pages/s in-process)" if speed.get(extractor) else extractor
            summarize(label, pages, outputs, args.worst)
    if args.bin:
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {name: pool.submit(run_bin, args.bin, name, page) for name, page in pages.items()}
            outputs = {name: future.result() for name, future in futures.items()}
        elapsed = time.monotonic() - start
        f1 = summarize(f"factomat extract ({elapsed:.1f} s wall, {args.jobs} jobs)", pages, outputs, args.worst)
        if args.floor is not None and f1 < args.floor:
            print(f"FAIL: mean F1 {f1:.3f} is below the floor {args.floor:.3f}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
