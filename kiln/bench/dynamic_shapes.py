"""Workload `dynamic`: shapes that change and Python that branches, compiled and eager.

Five cases, each with the target it is measured against:

* **djit with a branch.** An MLP 256-256-256-10 with a softmax, batch 32, whose forward
  takes ``if h.sum() > 0:`` on its hidden layer: kiln eager, ``kiln.djit`` (the Python runs
  every call, its ops recorded and run as compiled plans), ``kiln.compile`` of it (a plan
  per path, guarded on the branch value) and of the same MLP without the branch (static).
  Target: djit <= 0.7x kiln eager.
* **A varying batch.** The same MLP (no branch) for inference, one round = one call at each
  batch 8, 16, 24, 32, 40: kiln eager; ``kiln.compile`` with ``dynamic_dims`` naming the
  batch; ``kiln.compile`` with no flags (the first batch gets a static plan, the batch dim
  then becomes dynamic); and ``dynamic=False``, a static plan per size (all compiled before
  timing). Target: <= 0.7x kiln eager, within 1.2x of the static plans.
* **Greedy generation.** A 4-layer 384-wide GPT (6 heads, vocab 512, block 128) generates 64
  tokens from a 16-token prompt, running the whole sequence each token: kiln eager,
  ``kiln.compile(model)`` with no flags (its first pass includes every compile, with empty
  kernel caches: the traces, and the calls that run in Python while the C compiles in the
  background), its later passes (once the builds have finished), and torch eager on the same
  weights. Target: the compiled first pass <= 1.0x kiln eager, later passes <= 0.5x.
* **KV-cache decoding.** The same GPT and prompt, with a key/value cache per layer: one call
  for the prompt, then one call per token on the newest token alone, its cache growing by one
  each call (`decode_step`). kiln eager, ``kiln.compile(decode_step)`` (no flags: the cache's
  length becomes dynamic) and torch eager. Target: kiln <= 1.0x torch eager per token.
* **Fixed-size KV-cache decoding** (what ``kiln.models.GPT.generate`` does). The caches are
  block-sized buffers written in place at each token's position (``index_copy_``), and
  attention masks the positions not yet written (`fixed_cache_step`), so every decode call
  has the same shapes: ``kiln.compile`` makes one plan for the prompt and one for every token.
  Same columns and target.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from types import ModuleType
from typing import Any, Callable

import numpy as np

from .peers import import_torch
from .real_size_models import gpt
from .real_sizes import fresh_kernel_caches
from .report import NOISY_NOTE, Table, fmt_ratio, fmt_timing, is_noisy, write_json
from .threads import numpy_blas_threads
from .timing import Timing, measure, repeat_calls

NAME = "dynamic"
DESCRIPTION = ("changing shapes: djit with a branch, a varying batch, greedy GPT generation and KV-cache "
               "decoding (grown and fixed-size caches) vs eager and torch")

BATCHES = (8, 16, 24, 32, 40)
GPT_SIZES = {"vocab": 512, "d": 384, "heads": 6, "layers": 4, "block": 128}
SMALL_GPT = {"vocab": 32, "d": 16, "heads": 2, "layers": 1, "block": 40}
PROMPT, TOKENS = 16, 64


def _mlp(lib: ModuleType) -> Any:
    nn = lib.nn
    lib.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _inputs(kiln: ModuleType, batch: int) -> Any:
    return kiln.tensor(np.random.default_rng(batch).standard_normal((batch, 256)).astype(np.float32))


# ---- djit with a data-dependent branch --------------------------------------------------
def branch_case(kiln: ModuleType, args: argparse.Namespace) -> list[tuple[str, Timing, float]]:
    """(column, timing, ratio to kiln eager) for the MLP with one data-dependent branch."""
    model = _mlp(kiln)
    F = kiln.nn.functional

    def with_branch(x: Any) -> Any:
        h = model[3](model[2](model[1](model[0](x))))
        if h.sum() > 0:  # data-dependent Python: the value must be computed to go on
            h = h * 0.5
        return F.softmax(model[4](h), -1)

    def without_branch(x: Any) -> Any:
        return F.softmax(model(x), -1)

    x = _inputs(kiln, 32)
    columns = [("kiln eager, with the branch", with_branch), ("kiln.djit, with the branch", kiln.djit(with_branch)),
               ("kiln.compile, with the branch (a plan per path)", kiln.compile(with_branch)),
               ("kiln.compile, no branch (static)", kiln.compile(without_branch))]
    out = []
    with kiln.no_grad():
        for name, fn in columns:
            out.append((name, measure(repeat_calls(lambda fn=fn: fn(x)), number=None, repeat=args.repeat,
                                      warmup=args.warmup)))
    eager = out[0][1].median
    return [(name, t, t.median / eager) for name, t in out]


# ---- a varying batch ----------------------------------------------------------------------
def batch_case(kiln: ModuleType, args: argparse.Namespace) -> list[tuple[str, Timing, float]]:
    """(column, timing of one round over BATCHES, ratio to kiln eager) for MLP inference."""
    model = _mlp(kiln)
    xs = [_inputs(kiln, b) for b in BATCHES]
    columns = [("kiln eager", model),
               ("kiln.compile, dynamic_dims batch", kiln.compile(model, dynamic_dims={0: {0: "B"}})),
               ("kiln.compile, no flags (automatic)", kiln.compile(model)),
               ("kiln.compile, dynamic=False (a plan per size)",
                kiln.compile(model, dynamic=False, max_cache_entries=len(BATCHES)))]
    out = []
    with kiln.no_grad():
        for name, fn in columns:
            def round_(fn: Callable = fn) -> None:
                for x in xs:
                    fn(x)
            for _ in range(3):  # every plan compiled and warm before timing
                round_()
            out.append((name, measure(repeat_calls(round_), number=None, repeat=args.repeat, warmup=args.warmup)))
    eager = out[0][1].median
    return [(name, t, t.median / eager) for name, t in out]


# ---- greedy generation --------------------------------------------------------------------
def _generate(lib: ModuleType, forward: Callable, prompt: Any, tokens: int) -> tuple[Any, float]:
    """Greedy decoding, the whole sequence each token; (the tokens, seconds)."""
    idx = prompt
    start = time.perf_counter()
    with lib.no_grad():
        for _ in range(tokens):
            logits = forward(idx)
            idx = lib.cat([idx, logits[:, -1, :].argmax(-1, keepdim=True)], 1)
    return idx, time.perf_counter() - start


def _token_columns(kiln: ModuleType, torch: ModuleType | None, args: argparse.Namespace,
                   make: Callable[[ModuleType, Any, dict], Callable], run: Callable) -> dict:
    """Per-token milliseconds of kiln eager, kiln.compile's first pass (empty kernel caches) and later
    passes, and torch eager on the same weights, for the function ``make(lib, model, sizes)`` driven by
    ``run(lib, function, prompt, tokens, sizes) -> (tokens, seconds)``; and whether all tokens agree."""
    sizes = SMALL_GPT if args.small else GPT_SIZES
    tokens = 8 if args.small else TOKENS
    kiln.manual_seed(0)
    model = gpt(kiln, **sizes).eval()
    prompt_np = np.random.default_rng(0).integers(0, sizes["vocab"], (1, PROMPT if not args.small else 4))
    prompt = kiln.tensor(prompt_np)
    passes = max(1, args.passes)
    function = make(kiln, model, sizes)
    eager = [run(kiln, function, prompt, tokens, sizes) for _ in range(passes)]
    result: dict = {"tokens": tokens, "model": sizes,
                    "kiln eager": statistics.median(t for _, t in eager) / tokens * 1e3}
    with fresh_kernel_caches(keep=args.warm_caches), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        compiled = kiln.compile(function)
        first_ids, first = run(kiln, compiled, prompt, tokens, sizes)
        start = time.perf_counter()
        kiln.jit.wait_for_builds()  # the later passes run the generated code
        result["builds left after the first pass (s)"] = time.perf_counter() - start
        later = [run(kiln, compiled, prompt, tokens, sizes) for _ in range(passes)]
    result["kiln.compile first pass"] = first / tokens * 1e3
    result["kiln.compile later passes"] = statistics.median(t for _, t in later) / tokens * 1e3
    result["traces"] = compiled.stats.traces
    same = [np.array_equal(ids.numpy(), eager[0][0].numpy()) for ids in (first_ids, later[-1][0])]
    if torch is not None:
        twin = gpt(torch, **sizes).eval()
        twin.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy()) for k, v in model.state_dict().items()})
        runs = [run(torch, make(torch, twin, sizes), torch.from_numpy(prompt_np), tokens, sizes) for _ in range(passes)]
        result["torch eager"] = statistics.median(t for _, t in runs) / tokens * 1e3
        same.append(np.array_equal(runs[0][0].numpy(), eager[0][0].numpy()))
    result["same tokens"] = all(same)
    return result


def generation_case(kiln: ModuleType, torch: ModuleType | None, args: argparse.Namespace) -> dict:
    """Greedy generation through the model itself (kiln.compile(model)): see `_token_columns`."""
    return _token_columns(kiln, torch, args, lambda lib, model, sizes: model,
                          lambda lib, fn, prompt, tokens, sizes: _generate(lib, fn, prompt, tokens))


# ---- KV-cache decoding --------------------------------------------------------------------
def decode_step(lib: ModuleType, model: Any, heads: int) -> Callable:
    """One step of cached decoding with `model` (real_size_models.gpt's GPT): ``step(idx, caches)``
    runs tokens `idx` (B, t) after the cached ones and returns (the last position's logits, the caches
    grown by t); `caches` holds (keys, values) of shape (B, heads, cached, d / heads) per layer."""
    F = lib.nn.functional

    def step(idx: Any, caches: list) -> tuple:
        b, t = idx.shape
        start = caches[0][0].shape[2]
        x = model.tok(idx) + model.pos(lib.arange(start, start + t))
        grown = []
        for block, (past_k, past_v) in zip(model.blocks, caches):
            h = block.ln1(x)
            c = h.shape[-1]
            q, k, v = block.attn.qkv(h).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            k, v = lib.cat([past_k, k], 2), lib.cat([past_v, v], 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / (c // heads) ** 0.5)
            if t > 1:  # the prompt: each position sees itself and the ones before it
                att = att.masked_fill(block.attn.mask[:, :, start:start + t, :start + t] == 0, float("-inf"))
            y = (F.softmax(att, -1) @ v).transpose(1, 2).contiguous().view(b, t, c)
            x = x + block.attn.proj(y)
            x = x + block.mlp(block.ln2(x))
            grown.append((k, v))
        return model.head(model.ln_f(x[:, -1:, :])), grown

    return step


def _decode(lib: ModuleType, step: Callable, prompt: Any, tokens: int, sizes: dict) -> tuple[Any, float]:
    """Greedy decoding with a cache: the prompt in one call, then a call per token; (tokens, seconds)."""
    hd = sizes["d"] // sizes["heads"]
    empty = lib.zeros(prompt.shape[0], sizes["heads"], 0, hd)
    caches = [(empty, empty) for _ in range(sizes["layers"])]
    idx, last = prompt, prompt
    start = time.perf_counter()
    with lib.no_grad():
        for _ in range(tokens):
            logits, caches = step(last, caches)
            last = logits[:, -1, :].argmax(-1, keepdim=True)
            idx = lib.cat([idx, last], 1)
    return idx, time.perf_counter() - start


def decode_case(kiln: ModuleType, torch: ModuleType | None, args: argparse.Namespace) -> dict:
    """Cached decoding through `decode_step` (kiln.compile(decode_step)): see `_token_columns`."""
    return _token_columns(kiln, torch, args, lambda lib, model, sizes: decode_step(lib, model, sizes["heads"]),
                          _decode)


def fixed_cache_step(lib: ModuleType, model: Any, heads: int) -> Callable:
    """One step of decoding with fixed-size caches: ``step(idx, input_pos, caches)`` runs tokens `idx`
    (B, t) at positions `input_pos` (t,), writes their keys and values into `caches` ((keys, values)
    of shape (B, heads, block, d / heads) per layer) in place, and returns the last position's logits.
    Each position attends to the written positions up to its own."""
    F = lib.nn.functional

    def step(idx: Any, input_pos: Any, caches: list) -> Any:
        b, t = idx.shape
        x = model.tok(idx) + model.pos(input_pos)
        for block, (cache_k, cache_v) in zip(model.blocks, caches):
            h = block.ln1(x)
            c = h.shape[-1]
            q, k, v = block.attn.qkv(h).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            cache_k.index_copy_(2, input_pos, k)
            cache_v.index_copy_(2, input_pos, v)
            visible = lib.arange(cache_k.shape[2]).unsqueeze(0) <= input_pos.unsqueeze(1)
            y = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=visible)
            x = x + block.attn.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            x = x + block.mlp(block.ln2(x))
        return model.head(model.ln_f(x[:, -1:, :]))

    return step


def _fixed_decode(lib: ModuleType, step: Callable, prompt: Any, tokens: int, sizes: dict) -> tuple[Any, float]:
    """Greedy decoding with fixed-size caches: the prompt in one call, then a call per token."""
    shape = (prompt.shape[0], sizes["heads"], sizes["block"], sizes["d"] // sizes["heads"])
    caches = [(lib.zeros(*shape), lib.zeros(*shape)) for _ in range(sizes["layers"])]
    idx, last, length = prompt, prompt, prompt.shape[1]
    start = time.perf_counter()
    with lib.no_grad():
        logits = step(prompt, lib.arange(length), caches)
        for i in range(tokens):
            last = logits[:, -1, :].argmax(-1, keepdim=True)
            idx = lib.cat([idx, last], 1)
            if i + 1 < tokens:
                logits = step(last, lib.arange(length + i, length + i + 1), caches)
    return idx, time.perf_counter() - start


def fixed_decode_case(kiln: ModuleType, torch: ModuleType | None, args: argparse.Namespace) -> dict:
    """Decoding with fixed-size caches through `fixed_cache_step` (kiln.compile of it): see `_token_columns`."""
    return _token_columns(kiln, torch, args,
                          lambda lib, model, sizes: fixed_cache_step(lib, model, sizes["heads"]), _fixed_decode)


# ---- command line -----------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=20, help="timed samples per column (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed samples per column (default 3)")
    parser.add_argument("--passes", type=int, default=3, help="timed generation passes per column (default 3)")
    parser.add_argument("--small", action="store_true", help="a tiny GPT and 8 tokens (for tests)")
    parser.add_argument("--warm-caches", action="store_true",
                        help="keep the usual kernel caches (the compiled first pass is then not cold)")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch eager column")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to PATH as JSON")


def _table(title: str, rows: list[tuple[str, Timing, float]], unit: float, target: str) -> str:
    table = Table(["column", "ms", "/ kiln eager"])
    for name, timing, ratio in rows:
        table.add_row([name, fmt_timing(timing, unit), fmt_ratio(ratio)])
    return f"{title}\n{table.render()}\ntarget: {target}"


def _print_decode(title: str, decode: dict) -> None:
    table = Table(["column", "ms/token", "/ kiln eager", "/ torch eager"])
    for name in ("kiln eager", "kiln.compile first pass", "kiln.compile later passes", "torch eager"):
        if name in decode:
            to_torch = decode[name] / decode["torch eager"] if "torch eager" in decode else None
            table.add_row([name, f"{decode[name]:.2f}", fmt_ratio(decode[name] / decode["kiln eager"]),
                           fmt_ratio(to_torch)])
    print(f"\n{title}")
    print(table.render())
    print(f"compiled traces: {decode['traces']}; every column generated the same tokens: {decode['same tokens']}; "
          f"background builds went on {decode['builds left after the first pass (s)']:.2f} s after the first pass")
    print("target: kiln <= 1.0x torch eager per token")


def run(args: argparse.Namespace) -> int:
    """Measure the five cases, print their tables, maybe write JSON."""
    import kiln  # noqa: PLC0415

    if args.repeat < 1 or args.warmup < 0 or args.passes < 1:
        raise SystemExit("kiln.bench dynamic: need --repeat >= 1, --warmup >= 0, --passes >= 1")
    threads = numpy_blas_threads()
    torch = None if args.no_torch else import_torch(num_threads=threads)
    print(f"{NAME}: kiln {kiln.__version__}, numpy BLAS threads {threads}"
          + (f", torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else ", torch skipped"))
    sys.stdout.flush()
    branch = branch_case(kiln, args)
    print("\n" + _table("MLP 256-256-256-10 + softmax, B=32, one data-dependent branch", branch, 1e-3,
                        "kiln.djit <= 0.7x kiln eager"))
    batch = batch_case(kiln, args)
    static = batch[-1][1].median
    print("\n" + _table(f"MLP inference, one call at each batch {BATCHES}", batch, 1e-3,
                        "<= 0.7x kiln eager, within 1.2x of the static plans"))
    print("  / static plans: " + ", ".join(f"{name}: {fmt_ratio(t.median / static)}" for name, t, _ in batch[1:3]))
    generation = generation_case(kiln, torch, args)
    table = Table(["column", "ms/token", "/ kiln eager"])
    eager = generation["kiln eager"]
    for name in ("kiln eager", "kiln.compile first pass", "kiln.compile later passes", "torch eager"):
        if name in generation:
            table.add_row([name, f"{generation[name]:.2f}", fmt_ratio(generation[name] / eager)])
    sizes = generation["model"]
    print(f"\nGreedy generation, GPT {sizes['layers']}L d={sizes['d']} vocab {sizes['vocab']}, "
          f"{generation['tokens']} tokens, the whole sequence each token")
    print(table.render())
    print(f"compiled traces: {generation['traces']}; every column generated the same tokens: "
          f"{generation['same tokens']}; background builds went on "
          f"{generation['builds left after the first pass (s)']:.2f} s after the first pass")
    print("target: the compiled first pass <= 1.0x kiln eager, later passes <= 0.5x")
    decode = decode_case(kiln, torch, args)
    _print_decode(f"KV-cache decoding, the same GPT, {decode['tokens']} tokens, caches grown by cat", decode)
    fixed = fixed_decode_case(kiln, torch, args)
    _print_decode(f"KV-cache decoding, fixed-size caches written in place (as GPT.generate), "
                  f"{fixed['tokens']} tokens", fixed)
    if any(is_noisy(t) for _, t, _ in branch + batch):
        print(NOISY_NOTE)
    if args.json:
        payload = {"workload": NAME,
                   "branch": [{"column": n, "timing": t.as_dict(1e-3), "ratio": r} for n, t, r in branch],
                   "batch": [{"column": n, "timing": t.as_dict(1e-3), "ratio": r} for n, t, r in batch],
                   "generation": generation, "decode": decode, "fixed-size decode": fixed}
        try:
            print(f"wrote {write_json(args.json, payload)}")
        except OSError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0
