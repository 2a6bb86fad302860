"""A QLoRA training step measured end to end: stock bitsandbytes, Unsloth's dequantizer and nf4kernel
in the same model, only the dequantizer changing between columns.

    python -m benchmarks._training --out benchmarks/results/training/h100      # needs a CUDA GPU

The model is what a user loads: a Llama checkpoint (random weights, from a ``transformers`` config,
saved and loaded back through ``from_pretrained`` with a 4-bit ``BitsAndBytesConfig``; nothing is
downloaded), ``prepare_model_for_kbit_training``, PEFT LoRA r=16 on every linear. On the GPU it has
Llama-3-8B's layer dimensions and a few layers; the tests use the same code on a tiny one.

For each setting (batch x sequence): first the columns' losses over a few steps from the same adapter
and optimizer state, which must be ``torch.equal`` (a column that is fast and wrong is no column);
then interleaved rounds of steps, each column timed in every round (wall clock over the steps, the
GPU synchronized at both ends), the median over rounds; the peak memory of a round; where one step's
GPU time goes (torch.profiler: dequantize kernels, matmuls, the rest, and the idle gap the host
leaves); and decode (one token at a time with the KV cache, no grad) at batch 1 and 8.
"""

from __future__ import annotations

if __name__ == "__main__":  # before torch is imported: where it is missing, one line, not a traceback
    from harness.core import exits

    exits.require(
        ("torch",),
        "python -m benchmarks._training",
        "on a GPU machine set up as the runner is (docs/self-hosted-runner.md), with transformers and peft",
    )

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from harness.core import markdown as md

from ._training_settings import LLAMA3_8B_LAYER, SETTINGS, TRITON_OP, VOCAB


def save_checkpoint(path, layers: int, dims: dict = LLAMA3_8B_LAYER, vocab: int = VOCAB, seed: int = 0) -> None:
    """A Llama checkpoint with random bf16 weights, as ``save_pretrained`` writes it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, num_hidden_layers=layers, max_position_embeddings=4096, **dims)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path)


def load_qlora(path, device: str, rank: int = 16, seed: int = 1):
    """The 4-bit model a QLoRA user trains: NF4, double-quantized, bf16 compute, LoRA on every linear."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quantization = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    model = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=quantization, dtype=torch.bfloat16, device_map=device
    )
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    torch.manual_seed(seed)
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", lora_dropout=0.0)
    # train(): from_pretrained returns eval mode, in which bitsandbytes repacks a CPU weight for its
    # inference kernel at the first no-grad call (AVX512-BF16 machines): a trainer sets train mode.
    return get_peft_model(model, lora).train()


def adapters(model) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def batches(vocab: int, batch: int, sequence: int, device: str, seed: int = 2):
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield torch.randint(0, vocab, (batch, sequence), generator=generator).to(device)


def restore(model, start: dict) -> None:
    """Put back the adapters ``adapters(model)`` took."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(start[name])


def step(model, ids, optimizer) -> torch.Tensor:
    """One training step: forward with the inputs as labels, backward, the optimizer's step; the loss."""
    # Under mode="reduce-overhead" each step replays CUDA graphs whose outputs the next replay
    # overwrites: a new step is marked as such, and the loss kept is a copy (both free in eager).
    torch.compiler.cudagraph_mark_step_begin()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach().clone()


def train(model, steps: int, batch: int, sequence: int, seed: int = 2, lr: float = 1e-3):
    """``steps`` optimizer steps of AdamW on the adapters; the losses, stacked."""
    device = next(model.parameters()).device.type
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    data = batches(model.config.vocab_size, batch, sequence, device, seed)
    return torch.stack([step(model, next(data), optimizer) for _ in range(steps)])


def rotated(names: list, round_: int) -> list:
    """The columns in round ``round_``'s order: each column first in turn."""
    shift = round_ % len(names)
    return names[shift:] + names[:shift]


def dequantizers(unsloth: bool = True) -> dict:
    """Each column's context: stock bitsandbytes (nothing patched), Unsloth's ``fast_dequantize`` put in
    nf4kernel's place (where Unsloth imports), nf4kernel. Unsloth's error, if any, is the value."""
    import nf4kernel
    from nf4kernel import patching

    columns = {"bitsandbytes": contextlib.nullcontext, "nf4kernel": nf4kernel.patch}
    if not unsloth:
        columns["unsloth"] = "not asked for (--no-unsloth: its import patches transformers and PEFT)"
        return columns
    try:
        import unsloth  # it patches on import; its kernels module needs it loaded first
        from unsloth.kernels.utils import fast_dequantize
    except Exception as error:  # ImportError, or Unsloth refusing this machine
        columns["unsloth"] = f"{type(error).__name__}: {error}"
    else:
        columns["unsloth"] = lambda: patching.patch(dequantizer=fast_dequantize)
    return columns


def usable(columns: dict) -> dict:
    """The columns of ``dequantizers`` that can run (the others' values are why not)."""
    return {name: c for name, c in columns.items() if not isinstance(c, str)}


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def _compiled(model, mode: str | None):
    """The model as a column trains it: itself, or (``mode``) compiled afresh by Inductor, in its
    deterministic mode where this torch has it (``torch._inductor.config.deterministic``: no choice of
    kernel by timing, which could give two compiles of one model different sums)."""
    if mode is None:
        yield model
        return
    torch._dynamo.reset()
    config = torch._inductor.config
    settings = config.patch(deterministic=True) if hasattr(config, "deterministic") else contextlib.nullcontext()
    try:
        with settings:
            yield torch.compile(model, mode=mode)
    finally:
        torch._dynamo.reset()


def same_losses(model, columns: dict, steps: int, batch: int, sequence: int, mode: str | None = None) -> dict:
    """Each column trains ``steps`` steps from the same adapters and optimizer state: the losses and
    the adapters after, compared with stock bitsandbytes' by ``torch.equal``. Stock runs twice, first
    and last (``bitsandbytes again``): where stock differs from itself, the model's own kernels are not
    deterministic here and no column's difference can be pinned on its dequantizer.

    ``mode``: each column compiled afresh under ``torch.compile(mode=mode)`` (``_compiled``); a column
    that fails to train so is recorded with its error (the others still run), and where stock failed
    there is nothing to compare with (``losses_equal`` None)."""
    start = adapters(model)
    results, errors = {}, {}
    for name, context in [*columns.items(), ("bitsandbytes again", contextlib.nullcontext)]:
        restore(model, start)
        try:
            with context(), _compiled(model, mode) as forward:
                losses = train(forward, steps, batch, sequence)
        except Exception as error:
            if mode is None:
                raise
            errors[name] = _error(error)
            continue
        results[name] = (losses, adapters(model))
    stock_losses, stock_adapters = results.get("bitsandbytes", (None, None))
    found = {name: {"error": error} for name, error in errors.items()}
    for name, (losses, after) in results.items():
        found[name] = {
            "losses": losses.float().tolist(),
            "losses_equal": None if stock_losses is None else torch.equal(losses, stock_losses),
            "adapters_equal": None
            if stock_adapters is None
            else all(torch.equal(after[k], stock_adapters[k]) for k in after),
        }
    return found


def _error(error: Exception) -> str:
    """An error as the record keeps it: its type, message, and where it was raised (the last frames)."""
    frames = traceback.extract_tb(error.__traceback__)[-4:]
    where = "; ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames)
    return f"{type(error).__name__}: {str(error)[:400]} (at {where})"


def step_times(model, columns: dict, batch: int, sequence: int, rounds: int, steps: int) -> dict:
    device = "cuda"
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = next(batches(model.config.vocab_size, batch, sequence, device))
    times = {name: [] for name in columns}
    peaks = {name: 0 for name in columns}
    for r in range(rounds):
        for name in rotated(list(columns), r):
            with columns[name]():
                step(model, ids, optimizer)  # a warm step: the patch's first launch, the allocator's first blocks
                _synchronize(device)
                torch.cuda.reset_peak_memory_stats()
                started = time.perf_counter()
                for _ in range(steps):
                    step(model, ids, optimizer)
                _synchronize(device)
                times[name].append((time.perf_counter() - started) / steps * 1e3)
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated())
    return {
        name: {
            "step_ms": statistics.median(times[name]),
            "step_ms_rounds": times[name],
            "peak_memory_mb": peaks[name] / 2**20,
        }
        for name in columns
    }


KERNEL_KINDS = (  # (kind, substrings of a CUDA kernel's name), first match wins
    ("dequantize", ("dequantize", "kDequantize", "dequant")),
    ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "sm90_", "sm80_", "ampere_", "matmul")),
)


def where_time_goes(model, context, batch: int, sequence: int, steps: int = 3) -> dict:
    """One column's steps under torch.profiler: GPU time per kind of kernel, and the wall clock the GPU
    spent idle (the host's share: the step is host-bound where it is large)."""
    from torch.profiler import ProfilerActivity, profile

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = next(batches(model.config.vocab_size, batch, sequence, "cuda"))
    with context():
        for _ in range(2):  # warm
            model(input_ids=ids, labels=ids).loss.backward()
        _synchronize("cuda")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            started = time.perf_counter()
            for _ in range(steps):
                step(model, ids, optimizer)
            _synchronize("cuda")
            wall = (time.perf_counter() - started) * 1e3 / steps
    kinds = {"dequantize": 0.0, "matmul": 0.0, "other": 0.0}
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if not device_us or event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        kind = next((k for k, needles in KERNEL_KINDS if any(n in event.key for n in needles)), "other")
        kinds[kind] += device_us / 1e3 / steps
    busy = sum(kinds.values())
    return {**{f"{k}_ms": v for k, v in kinds.items()}, "gpu_idle_ms": max(wall - busy, 0.0), "wall_ms": wall}


def decode(model, columns: dict, batch: int, rounds: int = 7, prompt: int = 128, tokens: int = 32) -> dict:
    """Milliseconds per generated token, per column: one token at a time with the KV cache, no grad;
    the median over interleaved rounds (each column first in turn), after one warm pass each, and the
    rounds. A single pass is no figure: on an H100 one pass per column spread 1.6x with the same code
    in every column."""
    device = next(model.parameters()).device.type
    ids = next(batches(model.config.vocab_size, batch, prompt, device, seed=3))
    names = list(columns)

    def one_pass(name) -> float:
        with columns[name](), torch.no_grad():
            out = model(input_ids=ids, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            _synchronize(device)
            started = time.perf_counter()
            for _ in range(tokens):
                out = model(input_ids=token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            _synchronize(device)
            return (time.perf_counter() - started) * 1e3 / tokens

    for name in names:
        one_pass(name)  # warm
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in rotated(names, r):
            times[name].append(one_pass(name))
    return {name: {"ms_per_token": statistics.median(t), "rounds": t} for name, t in times.items()}


def linear_no_grad(columns: dict, tokens=(1, 8, 64), rounds: int = 7, calls: int = 200) -> dict:
    """One 4-bit linear as inference calls it (no grad), Llama-3-8B's up projection (4096 -> 14336),
    NF4 double-quantized, bf16: microseconds per call per column, median of interleaved rounds of
    ``calls`` calls, and whether its output equals stock's. Besides the columns, ``nf4kernel always``:
    nf4kernel's dequantize and ``F.linear`` even where bitsandbytes runs its fused kernel (the patch
    leaves that kernel alone; this is the measure of whether it should)."""
    import bitsandbytes as bnb

    import nf4kernel

    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(
        4096, 14336, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4", compress_statistics=True
    )
    layer = layer.to(torch.bfloat16).cuda()

    @contextlib.contextmanager
    def always():
        weight = layer.weight
        original = layer.forward
        layer.forward = lambda x: torch.nn.functional.linear(x, nf4kernel.dequantize(weight.data, weight.quant_state))
        try:
            yield
        finally:
            layer.forward = original

    every = {**columns, "nf4kernel always": always}
    found = {}
    for n in tokens:
        x = torch.randn(1, n, 4096, dtype=torch.bfloat16, device="cuda")
        with torch.no_grad():
            expected = layer(x)
            outputs, times = {}, {name: [] for name in every}
            for r in range(rounds + 1):  # the first round warms every column
                for name in rotated(list(every), r):
                    with every[name]():
                        outputs[name] = layer(x)
                        _synchronize("cuda")
                        started = time.perf_counter()
                        for _ in range(calls):
                            layer(x)
                        _synchronize("cuda")
                    if r:
                        times[name].append((time.perf_counter() - started) / calls * 1e6)
        found[str(n)] = {
            name: {
                "us_per_call": statistics.median(times[name]),
                "rounds": times[name],
                "equal_to_stock": torch.equal(outputs[name], expected),
            }
            for name in every
        }
    return found


def measure(
    layers: int = 2,
    rounds: int = 7,
    steps: int = 10,
    check_steps: int = 3,
    settings=SETTINGS,
    compile_at=(),
    unsloth: bool = True,
) -> dict:
    """Every figure, in one process (asv's ``setup_cache`` calls it once per run).

    ``unsloth``: import Unsloth for its column. Its import patches transformers and PEFT for the
    whole process, so every column then runs Unsloth's patched model, and on an H100 that model's
    training was not deterministic: stock bitsandbytes differed from itself from the second step
    (``benchmarks/results/training/h100``). Without it, stock is stock and the identity check holds
    each column to it exactly."""
    import bitsandbytes
    import peft
    import transformers

    columns = dequantizers(unsloth)
    errors = {name: c for name, c in columns.items() if isinstance(c, str)}
    columns = usable(columns)
    figures = {
        "device": torch.cuda.get_device_name(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "bitsandbytes": bitsandbytes.__version__,
        },
        "model": {"layers": layers, "vocab": VOCAB, **LLAMA3_8B_LAYER, "lora_rank": 16},
        "columns": list(columns),
        "errors": errors,
        "rounds": rounds,
        "steps_per_round": steps,
        "settings": {},
        "decode": {},
    }
    with tempfile.TemporaryDirectory(prefix="nf4kernel-llama-") as path:
        save_checkpoint(path, layers)
        model = load_qlora(path, "cuda")
    for batch, sequence in settings:
        key = f"{batch}x{sequence}"
        figure = {"identical": same_losses(model, columns, check_steps, batch, sequence)}
        figure["timed"] = step_times(model, columns, batch, sequence, rounds, steps)
        figure["where"] = {name: where_time_goes(model, c, batch, sequence) for name, c in columns.items()}
        figures["settings"][key] = figure
        print(f"training {key}: {json.dumps(figure)}", flush=True)  # the log keeps what a cut-off run measured
    for batch in (1, 8) if settings else ():
        figures["decode"][str(batch)] = decode(model, columns, batch)
        print(f"decode {batch}: {json.dumps(figures['decode'][str(batch)])}", flush=True)
    if settings:
        figures["linear_no_grad"] = linear_no_grad(columns)
        print(f"linear no grad: {json.dumps(figures['linear_no_grad'])}", flush=True)
    figures["compiled"] = {}
    if compile_at:
        from nf4kernel import patching

        from . import _triton_op

        if settings:  # (--compile-only leaves it out: measured with the rest)
            figures["triton_op_per_call"] = _triton_op.identity()
            print(f"triton_op per call: {json.dumps(figures['triton_op_per_call'])}", flush=True)
        # Unsloth's way of registering a kernel, with nf4kernel's kernel: the triton_op column.
        columns = {**columns, TRITON_OP: lambda: patching.patch(dequantizer=_triton_op.dequantize)}
    for batch, sequence in compile_at:
        key = f"{batch}x{sequence}"
        figures["compiled"][key] = compiled(model, columns, batch, sequence)
        print(f"compiled {key}: {json.dumps(figures['compiled'][key])}", flush=True)
    return figures


def compiled(model, columns: dict, batch: int, sequence: int, rounds: int = 5, steps: int = 10) -> dict:
    """The step under ``torch.compile`` (Inductor, default and ``reduce-overhead``: CUDA graphs).

    Per mode: each column's first losses, compiled afresh, against stock's compiled the same way
    (``same_losses``: stock again last, as the control); then the columns that trained, compiled once,
    timed in interleaved rounds. An error is the value, per column (a mode this stack can't train
    under), and timing's own error for the mode."""
    found = {}
    for mode in ("default", "reduce-overhead"):
        identical = same_losses(model, columns, 3, batch, sequence, mode=mode)
        entry = {"inductor_deterministic": hasattr(torch._inductor.config, "deterministic"), "identical": identical}
        trained = {name: c for name, c in columns.items() if "error" not in identical[name]}
        if trained:
            torch._dynamo.reset()  # compiled once, with Inductor's own settings, as a user compiles it
            try:
                entry["timed"] = step_times(torch.compile(model, mode=mode), trained, batch, sequence, rounds, steps)
            except Exception as error:  # recorded, not raised: the eager figures stand either way
                entry["error"] = _error(error)
            finally:
                torch._dynamo.reset()
        found[mode] = entry
    return found


def _ranged(value: float, rounds: list[float], digits: int) -> str:
    """A median with the range over its rounds: ``12.34 (12.01-12.90)``."""
    return f"{value:.{digits}f} ({min(rounds):.{digits}f}-{max(rounds):.{digits}f})"


def linear_table(found: dict) -> list[str]:
    """Markdown lines for ``linear_no_grad``'s figures."""
    names = list(next(iter(found.values())))
    rows = [
        [str(n), *(_ranged(v["us_per_call"], v["rounds"], 1) + " =" * v["equal_to_stock"] for v in per.values())]
        for n, per in found.items()
    ]
    return [
        "",
        "One 4096 -> 14336 Linear4bit without grad, µs per call (range over rounds; = : equal to stock):",
        "",
        *md.table(["tokens", *names], rows, align="l" + "r" * len(names)),
    ]


def table(figures: dict) -> str:
    """Markdown: the step per setting and column, its ratio to stock bitsandbytes, peak memory, identity."""
    columns = figures["columns"]
    lines = [
        f"{figures['device']}; Llama-3-8B layer dimensions, {figures['model']['layers']} layers, LoRA r=16 on every "
        f"linear, NF4 double-quantized, bf16; median of {figures['rounds']} interleaved rounds of "
        f"{figures['steps_per_round']} steps.",
        "",
    ]
    rows = []
    for key, figure in figures["settings"].items():
        stock = figure["timed"]["bitsandbytes"]["step_ms"]
        cells = []
        for name in columns:
            t = figure["timed"][name]
            ratio = "" if name == "bitsandbytes" else f" ({stock / t['step_ms']:.2f}x)"
            cells.append(f"{t['step_ms']:.2f} ms{ratio}, {t['peak_memory_mb']:.0f} MB")
        same = all(v["losses_equal"] and v["adapters_equal"] for n, v in figure["identical"].items() if n in columns)
        again = figure["identical"].get("bitsandbytes again")
        control = (
            "" if again is None else f" (stock against itself: {'equal' if again['losses_equal'] else 'NOT equal'})"
        )
        rows.append([key, *cells, f"{'yes' if same else 'NO'}{control}"])
    numbers = "l" + "r" * len(columns)
    lines += md.table(["batch x sequence", *columns, "losses and adapters equal to stock"], rows, align=numbers + "l")
    lines += ["", "Where one step's time goes (ms: dequantize kernels, matmuls, other kernels, GPU idle):", ""]
    parts = ("dequantize_ms", "matmul_ms", "other_ms", "gpu_idle_ms")
    rows = [
        [key, *(" / ".join(f"{figure['where'][n][part]:.2f}" for part in parts) for n in columns)]
        for key, figure in figures["settings"].items()
    ]
    lines += md.table(["batch x sequence", *columns], rows)  # left-aligned: four figures a cell
    lines += [
        "",
        "Decode, ms per token, median (range) of interleaved rounds (no grad: bitsandbytes' fused kernel):",
        "",
    ]
    rows = [
        [str(batch), *(_ranged(per[n]["ms_per_token"], per[n]["rounds"], 2) for n in columns)]
        for batch, per in figures["decode"].items()
    ]
    lines += md.table(["batch", *columns], rows, align=numbers)
    if "linear_no_grad" in figures:
        lines += linear_table(figures["linear_no_grad"])
    for key, modes in figures.get("compiled", {}).items():
        for mode, entry in modes.items():
            lines.append(f"\ntorch.compile mode={mode} at {key}:")
            for name, v in entry["identical"].items():
                t = entry.get("timed", {}).get(name)
                stock = entry.get("timed", {}).get("bitsandbytes")
                if "error" in v:
                    lines.append(f"- {name}: {v['error']}")
                    continue
                time_ = "" if t is None else f"{t['step_ms']:.2f} ms"
                if t and stock and name != "bitsandbytes":
                    time_ += f" ({stock['step_ms'] / t['step_ms']:.2f}x)"
                same = {True: "equal", False: "NOT equal", None: "no stock to compare"}[v["losses_equal"]]
                lines.append(f"- {name}: {time_ or 'not timed'}; losses against compiled stock's: {same}")
            if "error" in entry:
                lines.append(f"- timing: {entry['error']}")
    if "triton_op_per_call" in figures:
        lines += ["", "One call against bitsandbytes (torch.equal), nf4kernel's kernel as triton_op and custom_op:"]
        lines.append("")
        for key, per in figures["triton_op_per_call"].items():
            lines.append(f"- {key}: " + ", ".join(f"{n} {v}" for n, v in per.items()))
    if figures["errors"]:
        lines += ["", "Not measured: " + "; ".join(f"{k}: {v}" for k, v in figures["errors"].items())]
    return "\n".join(lines) + "\n"


def identity_only(args) -> int:
    """The columns' losses alone, at 1x512 and 1x2048: is a difference the dequantizer's or the model's?"""
    columns = usable(dequantizers(unsloth=not args.no_unsloth))
    with tempfile.TemporaryDirectory(prefix="nf4kernel-llama-") as path:
        save_checkpoint(path, args.layers)
        model = load_qlora(path, "cuda")
    found = {}
    for batch, sequence in SETTINGS[:2]:
        found[f"{batch}x{sequence}"] = same_losses(model, columns, args.identity_only, batch, sequence)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "identity-no-unsloth.json" if args.no_unsloth else "identity.json"
    (args.out / name).write_text(json.dumps(found, indent=1) + "\n")
    for key, per in found.items():
        for column, v in per.items():
            print(
                f"{key} {column}: losses equal {v['losses_equal']}, adapters equal {v['adapters_equal']}, {v['losses']}"
            )
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where training.json and training.md go")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="also under torch.compile, at 1x512")
    parser.add_argument("--compile-only", action="store_true", help="only the torch.compile figures, at 1x512")
    parser.add_argument("--identity-only", type=int, metavar="STEPS", help="only the columns' losses, STEPS steps")
    parser.add_argument("--linear-only", action="store_true", help="only one Linear4bit without grad, per call")
    parser.add_argument("--no-unsloth", action="store_true", help="don't import Unsloth (it patches on import)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks._training: needs a CUDA GPU (none here)", file=sys.stderr)
        return 4
    if args.identity_only:
        return identity_only(args)
    if args.linear_only:
        found = linear_no_grad(usable(dequantizers(unsloth=False)))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "linear-no-grad.json").write_text(json.dumps(found, indent=1) + "\n")
        print("\n".join([torch.cuda.get_device_name(), *linear_table(found)]))
        return 0
    compile_at = SETTINGS[:1] if args.compile or args.compile_only else ()  # 1x512: host-bound
    settings = () if args.compile_only else SETTINGS
    figures = measure(
        args.layers, args.rounds, args.steps, settings=settings, compile_at=compile_at, unsloth=not args.no_unsloth
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "training.json").write_text(json.dumps(figures, indent=1) + "\n")
    (args.out / "training.md").write_text(table(figures))
    print(table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
