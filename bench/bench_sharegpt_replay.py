"""One ShareGPT file through ``tuner load`` and ``vllm bench serve`` on one server.

Both clients take turns on the same running server for ``--rounds`` rounds (who goes first
alternates): tuner's generator as a user runs it (``tuner load --workload sharegpt:FILE
--tokenizer DIR``) and vLLM's own benchmark (``--dataset-name sharegpt --dataset-path FILE``,
through ``vllm_bench_serve.py``), with the same request count, concurrency and warm-up, and
output lengths from the file's answers. Per round and overall it prints each client's request
count and input / output token totals, whether they are equal, and tuner / vLLM output
throughput (per round, median and range).

What makes the two send the same requests:

- vLLM's sampler keeps an entry only if its prompt and answer are at least 4 tokens, the prompt
  at most 1,024 and both at most 2,048 (``is_valid_sequence``); tuner's reader skips the same
  entries, counting special tokens as vLLM's sampler does. The bench applies vLLM's rule, with
  vLLM's counts, to the file first and, when it drops entries, gives both clients the copy
  without them (``*-replayed.json``), naming what was dropped and why.
- vLLM shuffles the entries (``--seed``) unless ``--disable-shuffle``, which the bench passes,
  and draws extra requests at random beyond the entries (``--no-oversample`` is passed): the
  request count is the number of entries kept, so each client sends each entry once, in order.
- vLLM stops at EOS unless ``--ignore-eos`` (passed); tuner always ignores it.
- Both count tokens with the model's tokenizer: tuner without special tokens, vLLM's sampler
  with them (the totals both report are the server's usage counts). The bench says when the
  tokenizer adds special tokens, which would make the two disagree.

Without ``--dataset`` the bench writes a synthetic file of ``--conversations`` entries of the
tokenizer's own words (a WordLevel vocabulary, as tuner's catalogued models have), plus five
entries that vLLM's rule drops, deterministic in ``--seed``, into ``--out``.

    .venv/bin/python bench/bench_sharegpt_replay.py --launch tiny-ernie \\
        --vllm-python $TUNER_VLLM_PYTHON \\
        --server-arg "--enforce-eager --gpu-memory-utilization 0.1 --no-enable-prefix-caching" \\
        --concurrency 4 --rounds 3 --out DIR
    # a server that already runs, and a ShareGPT file of one's own:
    python bench/bench_sharegpt_replay.py --url http://127.0.0.1:8000 --model NAME \\
        --tokenizer DIR --vllm-python python3 --dataset sharegpt:FILE --concurrency 16

``--out DIR`` gets ``summary.json`` (the dataset, the expected totals and every round),
``runs.jsonl`` (one line per client run) and each run's result without its per-token arrays
(``tuner-rK.json``, ``vllm-rK.json``); the full results go to ``DIR/raw/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# vLLM's is_valid_sequence (vllm/benchmarks/datasets), as its ShareGPT sampler calls it: the
# limits tuner's ShareGPT reader applies too.
from tuner.load import traces  # noqa: E402

VLLM_MIN_LEN = traces.SHAREGPT_MIN_TOKENS
VLLM_MAX_PROMPT = traces.SHAREGPT_MAX_PROMPT
VLLM_MAX_TOTAL = traces.SHAREGPT_MAX_TOTAL
# A result's per-request arrays that are left out of the copies kept beside the summary.
BULKY = (
    "itls",
    "ttfts",
    "tpots",
    "latencies",
    "queue_times",
    "start_times",
    "generated_texts",
    "errors",
)
Count = Callable[[str], int]


def vllm_reason(prompt_len: int, output_len: int) -> str | None:
    """Why vLLM's ShareGPT sampler drops an entry of these lengths; None when it keeps it."""
    if prompt_len < VLLM_MIN_LEN:
        return f"prompt of {prompt_len} tokens (< {VLLM_MIN_LEN})"
    if output_len < VLLM_MIN_LEN:
        return f"answer of {output_len} tokens (< {VLLM_MIN_LEN})"
    if prompt_len > VLLM_MAX_PROMPT:
        return f"prompt of {prompt_len} tokens (> {VLLM_MAX_PROMPT})"
    if prompt_len + output_len > VLLM_MAX_TOTAL:
        return f"prompt + answer of {prompt_len + output_len} tokens (> {VLLM_MAX_TOTAL})"
    return None


def vllm_selection(
    data: Sequence[Any], count: Count
) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """The entries vLLM's ShareGPT sampler keeps, in the file's order (``--disable-shuffle``),
    and ``(index, why)`` for each it drops. ``count``: tokens as vLLM's sampler counts them
    (the tokenizer called on the text, special tokens added)."""
    kept: list[dict[str, Any]] = []
    dropped: list[tuple[int, str]] = []
    for index, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            dropped.append((index, "fewer than two turns (tuner skips it too)"))
            continue
        reason = vllm_reason(count(turns[0]["value"]), count(turns[1]["value"]))
        if reason is None:
            kept.append(entry)
        else:
            dropped.append((index, reason))
    return kept, dropped


def vocabulary(tokenizer_json: Path) -> list[str]:
    """The ordinary words of a WordLevel ``tokenizer.json`` (special tokens left out), by id."""
    data = json.loads(tokenizer_json.read_text())
    model = data.get("model") or {}
    if model.get("type") != "WordLevel":
        raise SystemExit(
            f"{tokenizer_json}: a {model.get('type')} tokenizer; the synthetic dataset needs a "
            "WordLevel one (tuner's catalogued models): give --dataset sharegpt:FILE"
        )
    special = {t["content"] for t in data.get("added_tokens") or ()}
    vocab: dict[str, int] = model["vocab"]
    return [w for w, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if w not in special]


def synthetic_sharegpt(words: Sequence[str], conversations: int, seed: int) -> list[dict[str, Any]]:
    """``conversations`` ShareGPT entries of ``words`` joined by spaces (one token each):
    prompts log-uniform in 8-320 words, answers in 8-160, every eighth with a second exchange
    (which neither client sends); then five that vLLM's sampler drops (one with no answer,
    two too short, two too long), spread through the file."""
    rng = random.Random(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    def log_uniform(low: int, high: int) -> int:
        return round(math.exp(rng.uniform(math.log(low), math.log(high))))

    def entry(name: str, prompt: int, answer: int | None, more: bool = False) -> dict[str, Any]:
        turns = [{"from": "human", "value": text(prompt)}]
        if answer is not None:
            turns.append({"from": "gpt", "value": text(answer)})
        if more:
            turns += [{"from": "human", "value": text(12)}, {"from": "gpt", "value": text(24)}]
        return {"id": name, "conversations": turns}

    data = [
        entry(f"s{i}", log_uniform(8, 320), log_uniform(8, 160), more=i % 8 == 7)
        for i in range(conversations)
    ]
    odd = [
        entry("x-no-answer", 40, None),
        entry("x-short-prompt", 2, 64),
        entry("x-short-answer", 64, 3),
        entry("x-long-prompt", VLLM_MAX_PROMPT + 6, 16),
        entry("x-long-total", 1000, VLLM_MAX_TOTAL - 1000 + 12),
    ]
    step = max(1, len(data) // len(odd))
    for k, e in enumerate(odd):
        data.insert(min(len(data), k * (step + 1) + step // 2), e)
    return data


def trim(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result without its per-token arrays (failed requests' errors kept, counted)."""
    out = {k: v for k, v in result.items() if k not in BULKY}
    errors = [e for e in result.get("errors") or () if e]
    out["errors_nonempty"] = len(errors)
    if errors:
        out["first_error"] = errors[0]
    return out


def run_row(rnd: int, client: str, result: Mapping[str, Any], wall_s: float) -> dict[str, Any]:
    """What the summary reads of one client run."""
    keys = (
        "num_prompts",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "duration",
        "output_throughput",
        "request_throughput",
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_itl_ms",
        "p99_itl_ms",
    )
    return (
        {"round": rnd, "client": client, "wall_s": wall_s}
        | {k: result.get(k) for k in keys}
        | {
            "input_lens": list(result.get("input_lens") or ()),
            "output_lens": list(result.get("output_lens") or ()),
        }
    )


def diagnose(tuner: Mapping[str, Any], vllm: Mapping[str, Any]) -> list[str]:
    """Where two runs' requests differ, in words (empty when they sent the same ones)."""
    notes = []
    if tuner["completed"] != vllm["completed"] or tuner["failed"] != vllm["failed"]:
        notes.append(
            f"requests: tuner {tuner['completed']} done + {tuner['failed']} failed, vLLM "
            f"{vllm['completed']} + {vllm['failed']} (entries filtered, oversampled or failed)"
        )
    if not (tuner["input_lens"] and vllm["input_lens"]):
        return notes  # a result without its per-request lengths
    t_in, v_in = Counter(tuner["input_lens"]), Counter(vllm["input_lens"])
    if t_in != v_in:
        notes.append(
            f"prompt lengths: {(t_in - v_in).total()} of tuner's and {(v_in - t_in).total()} of "
            "vLLM's have no equal in the other's (different entries drawn, or counted with / "
            "without special tokens)"
        )
    t_out, v_out = sorted(tuner["output_lens"]), sorted(vllm["output_lens"])
    if t_out != v_out:
        same_prompts = list(tuner["input_lens"]) == list(vllm["input_lens"])
        notes.append(
            f"output lengths: {sum(t_out)} tokens against {sum(v_out)}"
            + (" for the same prompts in the same order" if same_prompts else "")
            + " (an EOS not ignored, max_tokens counted differently, or other entries)"
        )
    return notes


def summarize(
    rows: Sequence[Mapping[str, Any]], expected: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """Per round: each client's request count and token totals, whether they are equal (and
    equal to ``expected`` ``requests`` / ``input`` / ``output`` when given), the notes of
    :func:`diagnose` and tuner / vLLM output throughput; overall: the rounds where everything
    was equal, and the ratio's median, range and spread (max / min - 1)."""
    by_round: dict[int, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        by_round.setdefault(int(row["round"]), {})[str(row["client"])] = row
    rounds: list[dict[str, Any]] = []
    for rnd in sorted(by_round):
        pair = by_round[rnd]
        if set(pair) != {"tuner", "vllm"}:
            continue
        counts = {
            client: {
                "requests": int(pair[client]["completed"] or 0),
                "failed": int(pair[client]["failed"] or 0),
                "input": int(pair[client]["total_input_tokens"] or 0),
                "output": int(pair[client]["total_output_tokens"] or 0),
                "output_throughput": float(pair[client]["output_throughput"] or 0.0),
            }
            for client in ("tuner", "vllm")
        }
        equal = {
            key: counts["tuner"][key] == counts["vllm"][key]
            for key in ("requests", "failed", "input", "output")
        }
        if expected is not None:
            for key in ("requests", "input", "output"):
                equal[f"{key}_as_expected"] = (
                    counts["tuner"][key] == counts["vllm"][key] == expected[key]
                )
        lens = [
            (list(pair[c].get("input_lens") or ()), list(pair[c].get("output_lens") or ()))
            for c in ("tuner", "vllm")
        ]
        v = counts["vllm"]["output_throughput"]
        rounds.append(
            {
                "round": rnd,
                **counts,
                "equal": equal,
                "all_equal": all(equal.values()),
                # The same prompt and output lengths, request by request: the same entries
                # in the same order.
                "same_order": lens[0] == lens[1] if all(i for i, _ in lens) else None,
                "notes": diagnose(pair["tuner"], pair["vllm"]),
                "ratio": counts["tuner"]["output_throughput"] / v if v > 0 else None,
            }
        )
    ratios: list[float] = [float(r["ratio"]) for r in rounds if r["ratio"] is not None]
    overall: dict[str, Any] = {
        "rounds": len(rounds),
        "rounds_equal": sum(1 for r in rounds if r["all_equal"]),
        "ratios": ratios,
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_min": min(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
        "ratio_spread": max(ratios) / min(ratios) - 1 if ratios and min(ratios) > 0 else None,
    }
    return {"rounds": rounds, "overall": overall}


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The printed summary."""
    lines = []
    for r in summary["rounds"]:
        for client in ("tuner", "vllm"):
            c = r[client]
            lines.append(
                f"round {r['round']} {client:<5}: {c['requests']} requests ({c['failed']} failed), "
                f"{c['input']:,} input + {c['output']:,} output tokens, "
                f"{c['output_throughput']:,.1f} output tok/s"
            )
        verdict = "equal" if r["all_equal"] else "NOT equal"
        if r["same_order"] is not None:
            verdict += ", requests " + (
                "in the same order" if r["same_order"] else "in another order"
            )
        ratio = f"x{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        lines.append(
            f"round {r['round']}: counts {verdict}; tuner / vLLM output throughput {ratio}"
        )
        lines += [f"  {note}" for note in r["notes"]]
    o = summary["overall"]
    if o["ratio_median"] is not None:
        lines.append(
            f"{o['rounds']} rounds, counts equal in {o['rounds_equal']}; tuner / vLLM output "
            f"throughput median x{o['ratio_median']:.3f}, range x{o['ratio_min']:.3f}-"
            f"x{o['ratio_max']:.3f} (spread {o['ratio_spread']:.1%})"
        )
    return lines


def run_tuner(
    args: argparse.Namespace, url: str, model: str, tokenizer: str, file: Path, n: int, raw: Path
) -> dict[str, Any]:
    where = raw / f"tuner-{uuid.uuid4().hex[:6]}"
    cmd = [
        sys.executable, "-m", "tuner", "load", url, "--model", model,
        "--workload", f"sharegpt:{file}", "--tokenizer", tokenizer,
        "--concurrency", str(args.concurrency), "--requests", str(n),
        "--warmup", str(args.warmup), "--vocab-size", str(args.vocab_size),
        "--save-result", str(where),
        *(["--text-prompts"] if args.tuner_prompts == "text" else []),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"tuner load failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    (path,) = where.iterdir()
    return dict(json.loads(path.read_text()))


def run_vllm(
    args: argparse.Namespace, url: str, model: str, tokenizer: str, file: Path, n: int, raw: Path
) -> dict[str, Any]:
    name = f"vllm-{uuid.uuid4().hex[:6]}.json"
    cmd = [
        args.vllm_python, str(ROOT / "bench" / "vllm_bench_serve.py"),
        "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "sharegpt", "--dataset-path", str(file),
        "--disable-shuffle", "--no-oversample", "--ignore-eos",
        "--max-concurrency", str(args.concurrency), "--num-prompts", str(n),
        "--num-warmups", str(args.warmup), "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99", "--disable-tqdm",
        "--save-result", "--save-detailed", "--result-dir", str(raw), "--result-filename", name,
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return dict(json.loads((raw / name).read_text()))


def prepare(args: argparse.Namespace, tokenizer: str, out: Path) -> tuple[Path, dict[str, Any]]:
    """The file both clients replay and what is known of it before any request."""
    from tokenizers import Tokenizer

    from tuner.load import read_trace, tokenizer_file

    tok_file = tokenizer_file(Path(tokenizer))
    if tok_file is None:
        raise SystemExit(f"no tokenizer.json in {tokenizer}")
    if args.dataset:
        fmt, _, rest = args.dataset.partition(":")
        if fmt != "sharegpt" or not rest:
            raise SystemExit(f"--dataset takes sharegpt:FILE, got {args.dataset!r}")
        source = Path(rest)
        data = json.loads(source.read_text())
    else:
        data = synthetic_sharegpt(vocabulary(tok_file), args.conversations, args.seed)
        source = out / "sharegpt-synthetic.json"
        source.write_text(json.dumps(data, indent=0) + "\n")
    tok = Tokenizer.from_file(str(tok_file))

    def with_specials(text: str) -> int:
        return len(tok.encode(text).ids)  # as the sampler's tokenizer(text).input_ids

    def without(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    kept, dropped = vllm_selection(data, with_specials)
    for index, why in dropped:
        print(f"entry {index}: vLLM's sampler drops it: {why}", flush=True)
    file = source
    if any("tuner skips" not in why for _, why in dropped):
        file = out / f"{source.stem}-replayed.json"
        file.write_text(json.dumps(kept, indent=0) + "\n")
        print(f"both clients replay {file} ({len(kept)} of {len(data)} entries)", flush=True)
    rows = read_trace(f"sharegpt:{file}", tokenizer=Path(tokenizer)).trace or ()
    pairs = [(e["conversations"][0]["value"], e["conversations"][1]["value"]) for e in kept]
    expected = {
        "requests": len(rows),
        "input": sum(r.prompt_tokens for r in rows),
        "output": sum(r.output_tokens for r in rows),
    }
    by_vllm = {
        "requests": len(kept),
        "input": sum(with_specials(q) for q, _ in pairs),
        "output": sum(with_specials(a) for _, a in pairs),
    }
    plain = sum(without(q) for q, _ in pairs), sum(without(a) for _, a in pairs)
    if by_vllm != expected or plain != (expected["input"], expected["output"]):
        print(
            f"warning: tuner reads {expected}, vLLM's sampler {by_vllm} (the tokenizer adds "
            "special tokens, or tuner's reader and vLLM's keep different entries)",
            flush=True,
        )
    info = {
        "source": str(source),
        "replayed": str(file),
        "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
        "entries": len(data),
        "dropped": [{"entry": i, "why": why} for i, why in dropped],
        "expected": expected,
        "vllm_sampler_counts": by_vllm,
    }
    print(
        f"{expected['requests']} requests, {expected['input']:,} input and "
        f"{expected['output']:,} output tokens by tuner's reading of {file.name}",
        flush=True,
    )
    return file, info


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": model or platform.processor(), "host": platform.node()}


def vllm_version(vllm_python: str) -> str:
    out = subprocess.run(
        [vllm_python, "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url")
    p.add_argument("--model", help="served model name (with --url)")
    p.add_argument("--tokenizer", help="the model's tokenizer directory (with --url)")
    p.add_argument("--launch", help="start this catalogued model instead of --url")
    p.add_argument("--server-arg", action="append", default=[], help="extra vLLM flag (--launch)")
    p.add_argument("--vllm-python", required=True, help="interpreter that has vLLM")
    p.add_argument("--dataset", help="sharegpt:FILE (default: a synthetic file in --out)")
    p.add_argument("--conversations", type=int, default=64, help="of the synthetic file")
    p.add_argument("--seed", type=int, default=0, help="of the synthetic file")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--vocab-size", type=int, default=1024, help="tuner's id prompts")
    p.add_argument(
        "--tuner-prompts",
        choices=("text", "ids"),
        default="text",
        help="what tuner sends for a prompt of N tokens: N words of the synthetic tokenizer "
        "(text, default: the server tokenizes text as it does vLLM's) or N token ids",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="sharegpt-replay-"))
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    from bench.bench_load_fidelity import server

    ctx = server(args, p)
    rows: list[dict[str, Any]] = []
    started = time.time()
    load_before = os.getloadavg()  # the machine may be shared: its load, before and after
    with ctx as (url, model, tokenizer):
        file, dataset = prepare(args, tokenizer, out)
        n = dataset["expected"]["requests"]
        if n < 4 * args.concurrency:
            raise SystemExit(
                f"{n} requests at {args.concurrency} streams: tuner load sends at least 4 per "
                "stream; give more conversations or fewer streams"
            )
        with open(out / "runs.jsonl", "w") as sink:
            for rnd in range(1, args.rounds + 1):
                order = ("tuner", "vllm") if rnd % 2 else ("vllm", "tuner")
                for client in order:
                    t, load = time.time(), os.getloadavg()[0]
                    run = run_tuner if client == "tuner" else run_vllm
                    result = run(args, url, model, tokenizer, file, n, raw)
                    wall = time.time() - t
                    (out / f"{client}-r{rnd}.json").write_text(json.dumps(trim(result)) + "\n")
                    row = run_row(rnd, client, result, wall) | {"load_1min_before": load}
                    rows.append(row)
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    print(
                        f"round {rnd} {client:<5} {row['completed']} requests, "
                        f"{row['total_input_tokens']:,} in / {row['total_output_tokens']:,} out "
                        f"tokens, {row['output_throughput']:,.1f} out tok/s ({wall:.0f} s)",
                        flush=True,
                    )
    summary = summarize(rows, dataset["expected"])
    print()
    print("\n".join(summary_lines(summary)))
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": round(time.time() - started, 1),
        "command": sys.argv,
        "machine": machine(),
        "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()},
        "vllm": vllm_version(args.vllm_python),
        "server": args.launch or args.url,
        "server_args": args.server_arg,
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "tuner_prompts": args.tuner_prompts,
        "dataset": dataset,
        **summary,
    }
    (out / "summary.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nresults in {out}")
    return 0 if summary["overall"]["rounds_equal"] == summary["overall"]["rounds"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
