#!/usr/bin/env python3
"""Main-text extraction quality on the two development corpora, read in place (never copied).

mozilla-readability (130 pages): texts are scored against each page's expected.html (the content
Readability.js keeps) with the ScrapingHub article-extraction-benchmark measure: word tokens
(lowercased \\w+ runs), 4-token shingles counted as multisets, precision / recall / F1 per page,
averaged over pages. Title and excerpt agreement with expected-metadata.json are reported too.

trafilatura-eval (990 pages): trafilatura's own rule (the corpus README). Per page, each "with"
snippet found as an exact substring of the extracted text is a true positive, each one missing a
false negative; each "without" snippet found is a false positive. Precision, recall and F1 are
pooled over all pages. The corpus is split in two fixed halves by a hash of the file name
(HELD_OUT below): the tuning half is what extractor changes are judged on; the held-out half is
scored only to check that a change generalises.

Sources of texts:
  --bin PATH      run `PATH extract --max-text-chars 0 FILE...` (the service's own extractor,
                  exactly as VM01 runs it), one process per corpus and job;
  --trafilatura PYTHON
                  run trafilatura (bench/trafilatura/run.py) with that interpreter on the same files;
  --jsonl FILE    mozilla lines {extractor, page, text} written by bench/extract-compare.

--floor-mozilla F / --floor-trafilatura F fail (exit 1) when --bin scores below F on that corpus
(the trafilatura floor applies to the whole corpus, both halves).
"""

import argparse
import collections
import concurrent.futures
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MOZILLA = os.environ.get("FACTOMAT_CORPUS", "/work/shared/corpus/mozilla-readability")
DEFAULT_TRAFILATURA = "/work/shared/corpus/trafilatura-eval"
TRAFILATURA_RUNNER = os.path.join(ROOT, "bench", "trafilatura", "run.py")
TOKEN = re.compile(r"\w+", re.UNICODE)


def held_out(file_name):
    """The held-out half: pages whose SHA-256 of the UTF-8 file name starts with a hex digit
    8-f (the hash's top bit is set). Fixed for good; never tuned against."""
    return hashlib.sha256(file_name.encode("utf-8")).hexdigest()[0] in "89abcdef"


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


# ---- corpora -------------------------------------------------------------------------------


def load_mozilla(root):
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


def load_trafilatura(root):
    """{file name: {source, url, with, without, held_out}} for every page whose file exists."""
    with open(os.path.join(root, "evaldata.json"), encoding="utf-8") as f:
        data = json.load(f)
    pages = {}
    for url, entry in data.items():
        name = entry["file"]
        for folder in ("eval", "cache"):
            source = os.path.join(root, folder, name)
            if os.path.isfile(source):
                pages[name] = {"source": source, "url": url, "with": entry["with"],
                               "without": entry["without"], "held_out": held_out(name)}
                break
    return pages


# ---- running extractors --------------------------------------------------------------------


def run_bin_batch(binary, sources, extra_args):
    """One `factomat extract` process over `sources`; one JSON document per line, in order."""
    command = [binary, "extract", "--max-text-chars", "0", *extra_args, *sources]
    done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"factomat extract failed: {done.stderr.decode(errors='replace')}")
    lines = done.stdout.decode().splitlines()
    if len(lines) != len(sources):
        raise SystemExit(f"factomat extract printed {len(lines)} documents for {len(sources)} files")
    return [json.loads(line) for line in lines]


def run_bin(binary, pages, extra_args, jobs):
    """{page: {text, title, description}} from `jobs` parallel batch processes; wall seconds."""
    names = list(pages)
    chunks = [names[i::jobs] for i in range(jobs)]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(
            lambda chunk: run_bin_batch(binary, [pages[n]["source"] for n in chunk], extra_args),
            chunks))
    elapsed = time.monotonic() - started
    outputs = {}
    for chunk, documents in zip(chunks, results):
        for name, doc in zip(chunk, documents):
            outputs[name] = {"text": doc["content"]["text"], "title": doc["metadata"]["title"],
                             "description": doc["metadata"]["description"]}
    return outputs, elapsed


def run_trafilatura(python, pages, jobs):
    """{page: {text}} from bench/trafilatura/run.py under `python`; wall seconds."""
    names = list(pages)
    chunks = [names[i::jobs] for i in range(jobs)]

    def one(chunk):
        done = subprocess.run([python, TRAFILATURA_RUNNER, "--print",
                               *[pages[n]["source"] for n in chunk]],
                              capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"trafilatura failed: {done.stderr.decode(errors='replace')}")
        return [json.loads(line)["text"] for line in done.stdout.decode().splitlines()]

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, chunks))
    elapsed = time.monotonic() - started
    outputs = {}
    for chunk, texts in zip(chunks, results):
        for name, text in zip(chunk, texts):
            outputs[name] = {"text": text}
    return outputs, elapsed


# ---- scoring -------------------------------------------------------------------------------


def summarize_mozilla(label, pages, outputs, worst=0):
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


def snippet_counts(page, text):
    """(tp, fn, fp, missed "with" snippets, kept "without" snippets) of one page."""
    missed = [s for s in page["with"] if s not in text]
    kept = [s for s in page["without"] if s in text]
    return len(page["with"]) - len(missed), len(missed), len(kept), missed, kept


def pooled(pages, outputs, names):
    tp = fn = fp = 0
    for name in names:
        t, n, p, _, _ = snippet_counts(pages[name], outputs[name]["text"])
        tp, fn, fp = tp + t, fn + n, fp + p
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def summarize_trafilatura(label, pages, outputs, halves, diffs=0, diff_half="tuning"):
    """Prints pooled P/R/F1 per requested half; returns the whole corpus's F1."""
    groups = {
        "tuning": [n for n in outputs if not pages[n]["held_out"]],
        "held-out": [n for n in outputs if pages[n]["held_out"]],
        "all": list(outputs),
    }
    results = {}
    for half in halves:
        p, r, f = pooled(pages, outputs, groups[half])
        results[half] = f
        print(f"{label} [{half}, {len(groups[half])} pages]: P {p:.3f}  R {r:.3f}  F1 {f:.3f}")
    if diffs:
        worst = []
        for name in groups[diff_half]:
            t, n, p, missed, kept = snippet_counts(pages[name], outputs[name]["text"])
            if n or p:
                worst.append((n + p, name, missed, kept))
        for _, name, missed, kept in sorted(worst, reverse=True)[:diffs]:
            print(f"  {name} ({len(outputs[name]['text'])} chars)")
            for s in missed:
                print(f"    missed: {s[:100]!r}")
            for s in kept:
                print(f"    kept:   {s[:100]!r}")
    return pooled(pages, outputs, groups["all"])[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mozilla", default=DEFAULT_MOZILLA, help="mozilla-readability corpus")
    parser.add_argument("--trafilatura-corpus", default=os.environ.get("FACTOMAT_TRAFILATURA_CORPUS",
                                                                       DEFAULT_TRAFILATURA))
    parser.add_argument("--corpus", choices=("mozilla", "trafilatura", "both"), default="both")
    parser.add_argument("--half", choices=("tuning", "held-out", "all", "split"), default="tuning",
                        help="trafilatura halves to print (split = both halves and the whole)")
    parser.add_argument("--bin", help="factomat binary to run `extract` with")
    parser.add_argument("--trafilatura", metavar="PYTHON", help="also score trafilatura run by PYTHON")
    parser.add_argument("--jsonl", help="mozilla texts written by bench/extract-compare")
    parser.add_argument("--floor-mozilla", type=float)
    parser.add_argument("--floor-trafilatura", type=float)
    parser.add_argument("--worst", type=int, default=0, help="list the N worst mozilla pages")
    parser.add_argument("--diffs", type=int, default=0,
                        help="list missed/kept snippets of the N worst trafilatura pages (tuning half)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    halves = ["tuning", "held-out", "all"] if args.half == "split" else [args.half]
    status = 0

    def fail(message):
        nonlocal status
        print(f"FAIL: {message}", file=sys.stderr)
        status = 1

    if args.corpus in ("mozilla", "both"):
        if not os.path.isdir(os.path.join(args.mozilla, "test-pages")):
            print(f"corpus not found at {args.mozilla}; set FACTOMAT_CORPUS", file=sys.stderr)
            return 2
        pages = load_mozilla(args.mozilla)
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
                summarize_mozilla(label, pages, outputs, args.worst)
        if args.bin:
            # The pages were captured from http://fakehost/test/ (Readability's test harness)
            # and are stored as UTF-8 whatever their <meta charset> says, so the charset is given.
            outputs, elapsed = run_bin(args.bin, pages, ["--url", "http://fakehost/test/",
                                                         "--content-type", "text/html; charset=utf-8"],
                                       args.jobs)
            f1 = summarize_mozilla(f"mozilla: factomat extract ({elapsed:.1f} s wall, {args.jobs} jobs)",
                                   pages, outputs, args.worst)
            if args.floor_mozilla is not None and f1 < args.floor_mozilla:
                fail(f"mozilla mean F1 {f1:.3f} is below the floor {args.floor_mozilla:.3f}")
        if args.trafilatura:
            outputs, elapsed = run_trafilatura(args.trafilatura, pages, args.jobs)
            summarize_mozilla(f"mozilla: trafilatura ({elapsed:.1f} s wall)", pages, outputs, args.worst)

    if args.corpus in ("trafilatura", "both"):
        if not os.path.isfile(os.path.join(args.trafilatura_corpus, "evaldata.json")):
            print(f"corpus not found at {args.trafilatura_corpus}; set FACTOMAT_TRAFILATURA_CORPUS",
                  file=sys.stderr)
            return 2
        pages = load_trafilatura(args.trafilatura_corpus)
        if args.bin:
            # No URL and no Content-Type: the charset comes from each page's own declaration.
            outputs, elapsed = run_bin(args.bin, pages, [], args.jobs)
            f1 = summarize_trafilatura(f"trafilatura-eval: factomat extract ({elapsed:.1f} s wall)",
                                       pages, outputs, halves, args.diffs)
            if args.floor_trafilatura is not None and f1 < args.floor_trafilatura:
                fail(f"trafilatura-eval F1 {f1:.3f} is below the floor {args.floor_trafilatura:.3f}")
        if args.trafilatura:
            outputs, elapsed = run_trafilatura(args.trafilatura, pages, args.jobs)
            summarize_trafilatura(f"trafilatura-eval: trafilatura ({elapsed:.1f} s wall)",
                                  pages, outputs, halves)
    return status


if __name__ == "__main__":
    sys.exit(main())
