"""The kernel compiles, to a cubin, for every GPU a runner fleet has (sm_75 T4 to sm_90 H100/H200) and
the newest target this Triton knows, in every format: no GPU needed (Triton's ahead-of-time path)."""

from __future__ import annotations

import re

import pytest
import torch

from nf4kernel import kernel as K
from nf4kernel import launch, targets

FORMAT_IDS = [
    f"{str(f.dtype)[6:]}-{'nested' if f.nested else 'flat'}-{'even' if f.even else 'odd'}" for f in targets.FORMATS
]


@pytest.mark.parametrize("variant,fmt", list(enumerate(targets.FORMATS)), ids=FORMAT_IDS)
@pytest.mark.parametrize("arch", list(targets.targets()), ids=lambda arch: f"sm_{arch}")
def test_compiles_for_every_target(fresh_triton_cache, arch, variant, fmt):
    layout = targets.layout_for(fmt, variant)
    compiled = targets.compile_for(arch, layout)
    assert compiled.asm["cubin"], "ptxas produced no cubin"
    assert f".target sm_{arch}" in compiled.asm["ptx"]
    # Compiled as a launch of that layout would: its tile's warps, fp fusion off (bit-exactness).
    _, tile, _ = launch.geometry(layout, interpreted=False)
    assert compiled.metadata.num_warps == tile.num_warps
    assert compiled.metadata.enable_fp_fusion is False
    assert "fma.rn.f32" not in compiled.asm["ptx"]
    # Programmatic dependent launch from sm_90 on, and every program waits for the kernel before.
    assert compiled.metadata.launch_pdl is (arch >= K.PDL_MIN_ARCH)
    assert ("griddepcontrol.wait" in compiled.asm["ptx"]) is (arch >= K.PDL_MIN_ARCH)


def test_the_matrix_covers_every_tile_row_wide_offsets_and_blocksizes():
    layouts = [targets.layout_for(fmt, variant) for variant, fmt in enumerate(targets.FORMATS)]
    geometry = [launch.geometry(layout, interpreted=False) for layout in layouts]
    table = K.gpu_tiles()
    rows = {next(i for i, row in enumerate(table) if (layout.n_elements + 1) // 2 >= row[0]) for layout in layouts}
    assert rows == set(range(len(table)))
    assert {constexprs["WIDE"] for _, _, constexprs in geometry} == {False, True}
    assert {constexprs["EVEN"] for _, _, constexprs in geometry} == {False, True}
    assert {layout.blocksize for layout in layouts} == {32, 64, 256, 4096}
    assert {(layout.dtype, layout.nested) for layout in layouts} == {
        (dtype, nested) for dtype in (torch.float16, torch.bfloat16, torch.float32) for nested in (False, True)
    }


def test_the_fleet_and_the_newest_target():
    assert {75, 80, 86, 89, 90} <= set(targets.targets())
    assert targets.newest_arch() >= 90


def test_compiling_while_other_threads_interpret(fresh_triton_cache, fast_thread_switching):
    # Triton's interpreter patches triton.language module-wide during a launch; a compile at the same
    # time would read the patched functions. Both hold kernel.TRITON_LOCK.
    import threading

    from conftest import bnb_dequantize, make_weight

    import nf4kernel

    packed, state = make_weight((64, 4096), torch.bfloat16)
    expected = bnb_dequantize(packed, state)
    stop, errors, results = threading.Event(), [], []

    def interpret():
        while not stop.is_set():
            try:
                results.append(torch.equal(nf4kernel.dequantize(packed, state), expected))
            except Exception as error:  # reported below
                errors.append(error)

    thread = threading.Thread(target=interpret)
    thread.start()
    try:
        for variant, fmt in enumerate(targets.FORMATS[:6]):
            assert targets.compile_for(80, targets.layout_for(fmt, variant)).asm["cubin"]
    finally:
        stop.set()
        thread.join()
    assert errors == [] and all(results)


def test_the_printed_table_lines_up_whatever_the_targets_and_outcomes(monkeypatch, capsys):
    """Targets of two widths (sm_75, sm_120), formats of every width, OK and FAILED rows: every column
    of every row starts where it does in the others; an error's further lines are indented below."""

    class Compiled:
        def __init__(self, n_bytes):
            self.asm = {"cubin": b"\0" * n_bytes}

    def compile_for(arch, layout):
        if arch == 120 and layout.dtype == torch.float32:
            raise RuntimeError("PTXAS error\nptxas fatal: a stand-in's failure")
        return Compiled(10 ** (1 + layout.blocksize % 5))  # sizes of several widths

    monkeypatch.setattr(targets, "compile_for", compile_for)
    assert targets.main(["75", "120"]) == 1
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if not line.startswith(" ")]
    assert len(rows) == 2 * len(targets.FORMATS)
    assert [line.strip() for line in lines if line.startswith(" ")] == ["ptxas fatal: a stand-in's failure"] * 4

    def starts(row: str) -> list[int]:  # where the target, dtype, flat/nested, even/odd, status, detail begin
        return [m.start() for m in re.finditer(r"\S+", row)][:6]

    assert len({tuple(starts(row)) for row in rows}) == 1, "\n".join(rows)
    assert {row.split()[4] for row in rows} == {"OK", "FAILED"}
    assert rows[-1].split()[:6] == ["sm_120", "float32", "nested", "odd", "FAILED", "RuntimeError:"]


def test_a_compute_capability_that_is_no_number_exits_2_in_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        targets.main(["sm_90"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("argument CC: invalid int value: 'sm_90'")
