"""Two copies of an asv results store merged so that no measured value is lost (standard library only:
the hosted job that writes the ``asv-results`` branch runs it with the runner's bare Python).

A store holds ``benchmarks.json`` (the suite's list) and, per machine, ``<machine>/machine.json`` (the
machine's description) and one file per commit and environment, ``<machine>/<commit8>-<env>.json``,
with one row per benchmark: its values, parameters, version, ``started_at``, ``duration``, statistics.
Copies meet in three places: the committed history seeded into ``.asv/results`` (``history.seed``),
``.asv/results`` stored into the committed history (``history.store``), and a run's results stored on
the ``asv-results`` branch (``results_branch.py``). The rules are the same everywhere:

* **A result file is merged benchmark by benchmark.** A benchmark only one copy has is kept. Where both
  have it and their rows differ, a row that measured something (a number, not asv's None for a failure
  or NaN for a skip) wins over one that measured nothing; otherwise the *newer measurement* wins: the
  row whose ``started_at`` (when asv began measuring that benchmark, in ms since the epoch) is later.
  Equal start times keep the copy already there. The file's own ``date`` is the commit's date, the
  same for every run of that commit, and ``duration`` is a length of time: neither orders two runs.
* **The file's own fields** (``params`` with the toolchain, ``python``, ``requirements``...) come from
  the copy holding the newest measurement, as asv itself does when it runs a commit again.
* **machine.json** comes from the copy whose results of that machine hold the newest measurement: it
  describes the machine (driver, toolchain) as it was when last measured. File times are not used: a
  checkout, a clone or an artifact download sets them all to the moment of copying.
* **benchmarks.json** is kept where there is one (``keep``: asv rewrites it from the checkout's suite at
  every run) or, storing, comes from the copy with the newest measurement (``newest``).

Every decision between two differing rows, and every machine.json or benchmarks.json replaced or kept
over another, is said in one line.

**A run's store adds, never rewrites** (``merge_tree(..., run=RunOnly(...))``: the ``asv-results``
branch's store). What a benchmark job uploads is not trusted: the job ran the merged kernel's code,
which could write a result file for any earlier commit with a later ``started_at``, or a machine.json
of its own. So such a store takes only what its run measured, told by its trusted caller (the
workflow's ``github.sha``), and the rules above give way to these:

* **Only the run's commits.** A result file is taken when its name (``<commit8>-<env>.json``) and its
  ``commit_hash`` are of a commit the run measured, or, for the nightly backfill (whose list of
  commits the GPU runner made), of a commit with no measured value stored on that machine yet: the
  only commits a backfill measures. Every other uploaded file is left out, one line each (files the
  same as stored are counted in one line), and the stored copy stays byte for byte.
* **A stored figure is never replaced**, not even by a newer measurement of the same commit: a
  result file already stored gains the rows of benchmarks it lacks, and a row that measured nothing
  (a failure, a skip) gains the figures of one that measured something (what a re-run or a backfill
  is for); its other rows and its own fields (``params``: the toolchain its figures were measured
  with) stay as stored.
* **machine.json and benchmarks.json are added where there are none, else kept byte for byte**: the
  stored results were measured under the stored description. Each result keeps its own ``params``
  (the machine, and the toolchain with the driver), which is what the site's graphs and the change
  points split lines on. A machine folder is stored only with a result the run measured, and only
  where its machine.json names that folder (asv's site takes each machine's description from that
  field, whatever folder holds it).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

SUITE_FILE = "benchmarks.json"
MACHINE_FILE = "machine.json"
RESULT_NAME = re.compile(r"([0-9a-f]{8})-.+\.json")  # asv's <commit8>-<env>.json


class NotAResultFile(ValueError):
    """A file of a store that can't be read as asv writes it; the message is one line: path and why."""


@dataclass
class Merged:
    """What a merge did, paths relative to the target store."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)  # one line per choice between two differing copies
    problems: list[str] = field(default_factory=list)  # files left alone because they can't be read

    @property
    def written(self) -> int:
        return len(self.added) + len(self.changed)

    def lines(self, name=str) -> list[str]:
        """What to say of it, one line each: every choice made, then every file added and changed,
        each file as ``name(relative path)`` names it."""
        return [
            *self.decisions,
            *(f"added {name(relative)}" for relative in self.added),
            *(f"changed {name(relative)}" for relative in self.changed),
        ]


@dataclass(frozen=True)
class RunOnly:
    """What one run measured, for a store that adds only that (module docstring): the result files of
    ``commits`` (full hashes) and, with ``unmeasured``, of any commit with no measured value stored."""

    commits: frozenset[str] = frozenset()
    unmeasured: bool = False

    def about(self) -> str:
        """What it takes, in the lines: ``0c0c0c0c0c0c, the commit this run measured``."""
        named = ", ".join(sorted(commit[:12] for commit in self.commits))
        unmeasured = "a commit with no measured value stored"
        if not self.unmeasured:
            return f"{named}, the commit{'s' if len(self.commits) > 1 else ''} this run measured"
        return f"{named} or {unmeasured}" if named else unmeasured


@dataclass
class _Side:
    """One copy of a store, and what it is called in the lines."""

    root: Path
    label: str


# --- Reading -----------------------------------------------------------------------------------------


def read_json(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise NotAResultFile(f"{path}: not readable as JSON ({_first_line(error)})") from None
    if not isinstance(doc, dict):
        raise NotAResultFile(f"{path}: not a JSON object")
    return doc


def rows_of(doc: dict, path: Path) -> dict[str, dict]:
    """Each benchmark's row as a dict keyed by the file's ``result_columns``."""
    results, columns = doc.get("results", {}), doc.get("result_columns", [])
    if not isinstance(results, dict) or not isinstance(columns, list):
        raise NotAResultFile(f"{path}: 'results' is not an object or 'result_columns' not a list")
    rows = {}
    for name, row in results.items():
        if not isinstance(row, list) or len(row) > len(columns):
            raise NotAResultFile(f"{path}: the row of {name} does not match the file's result_columns")
        rows[name] = dict(zip(columns, row, strict=False))  # asv drops trailing empty columns
    return rows


def read_result(path: Path) -> tuple[dict, dict[str, dict]]:
    doc = read_json(path)
    return doc, rows_of(doc, path)


def started(row: dict) -> float | None:
    value = row.get("started_at")
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def measured(row: dict) -> bool:
    """At least one number among the row's values (asv writes None for a failure, NaN for a skip)."""
    values = row.get("result")
    values = values if isinstance(values, list) else [values]
    return any(
        isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))
        for v in values
    )


def newest(rows) -> float | None:
    times = [t for t in map(started, rows) if t is not None]
    return max(times) if times else None


def is_gpu_machine(machine_json: Path) -> bool:
    return read_json(machine_json).get("gpu", "none") not in ("none", "", None)


# --- One result file -----------------------------------------------------------------------------------


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


def _when(ms: float | None) -> str:
    if ms is None:
        return "no start time"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _later(a: float | None, b: float | None) -> bool:
    """a is later than b (a time is later than none)."""
    return a is not None and (b is None or a > b)


def choose_row(kept: dict, incoming: dict, kept_label: str, incoming_label: str) -> tuple[bool, str]:
    """(True if ``incoming`` wins, why) for two differing rows of one benchmark."""
    if measured(kept) != measured(incoming):
        wins = measured(incoming)
        winner, loser = (incoming_label, kept_label) if wins else (kept_label, incoming_label)
        return wins, f"{winner}'s row measured values, {loser}'s none"
    t_kept, t_incoming = started(kept), started(incoming)
    if t_kept == t_incoming:
        return False, f"{kept_label}'s row is kept: both started {_when(t_kept)} (the copy already there stays)"
    wins = _later(t_incoming, t_kept)
    new, old = [(incoming_label, t_incoming), (kept_label, t_kept)][:: 1 if wins else -1]
    return wins, f"{new[0]}'s measurement wins, the newer: started {_when(new[1])}, {old[0]}'s {_when(old[1])}"


def merge_result(
    kept: dict, incoming: dict, where: str, kept_label: str, incoming_label: str
) -> tuple[dict, list[str]]:
    """One result file from two copies of it: (the merged document, a line per decision). ``where`` names
    the file in the lines and errors."""
    for key in ("commit_hash", "env_name"):
        if key in kept and key in incoming and kept[key] != incoming[key]:
            raise NotAResultFile(f"{where}: {kept_label} and {incoming_label} disagree on {key}: not one file")
    kept_rows, incoming_rows = rows_of(kept, where), rows_of(incoming, where)
    incoming_newer = _later(newest(incoming_rows.values()), newest(kept_rows.values()))
    newer_doc, older_doc = (incoming, kept) if incoming_newer else (kept, incoming)
    chosen, lines = {}, []
    for name in [*kept_rows, *(n for n in incoming_rows if n not in kept_rows)]:
        mine, theirs = kept_rows.get(name), incoming_rows.get(name)
        if theirs is None or mine is None:
            chosen[name] = mine if theirs is None else theirs
            continue
        if _canonical(mine) == _canonical(theirs):
            chosen[name] = mine
            continue
        incoming_wins, why = choose_row(mine, theirs, kept_label, incoming_label)
        chosen[name] = theirs if incoming_wins else mine
        lines.append(f"{where} {name}: {why}")
    columns = list(newer_doc.get("result_columns", []))
    columns += [c for c in older_doc.get("result_columns", []) if c not in columns]
    merged = {**newer_doc, **{key: value for key, value in older_doc.items() if key not in newer_doc}}
    merged["result_columns"] = columns
    merged["results"] = {name: _as_list(row, columns) for name, row in chosen.items()}
    if not all(isinstance(doc.get("durations", {}), dict) for doc in (kept, incoming)):
        raise NotAResultFile(f"{where}: 'durations' is not an object")
    durations = {**older_doc.get("durations", {}), **newer_doc.get("durations", {})}
    if durations or "durations" in merged:
        merged["durations"] = durations
    return merged, lines


def add_to_result(
    kept: dict, incoming: dict, where: str, kept_label: str, incoming_label: str
) -> tuple[dict, list[str]]:
    """``kept`` with what ``incoming`` adds and nothing it measured replaced (a run's store, module
    docstring): rows of benchmarks it lacks, and figures where its row measured nothing. Its own rows
    and fields stay as they are. Returns (the document, a line per row of ``incoming`` not taken or
    taken over one of ``kept``)."""
    for key in ("commit_hash", "env_name"):
        if kept.get(key) != incoming.get(key):
            raise NotAResultFile(f"{where}: {kept_label} and {incoming_label} disagree on {key}: not one file")
    kept_rows, incoming_rows = rows_of(kept, where), rows_of(incoming, where)
    if not all(isinstance(doc.get("durations", {}), dict) for doc in (kept, incoming)):
        raise NotAResultFile(f"{where}: 'durations' is not an object")
    columns = list(kept.get("result_columns", []))
    columns += [c for c in incoming.get("result_columns", []) if c not in columns]  # stored rows stay valid
    results, lines = dict(kept.get("results", {})), []
    for name, row in incoming_rows.items():
        mine = kept_rows.get(name)
        if mine is None or (measured(row) and not measured(mine)):
            results[name] = _as_list(row, columns)
            if mine is not None:
                lines.append(f"{where} {name}: {incoming_label}'s row measured values, {kept_label}'s none")
        elif _canonical(mine) != _canonical(row):
            lines.append(f"{where} {name}: {kept_label}'s row is kept: a stored figure is never replaced")
    merged = {**kept, "result_columns": columns, "results": results}
    durations = {**incoming.get("durations", {}), **kept.get("durations", {})}
    if durations or "durations" in merged:
        merged["durations"] = durations
    return merged, lines


def _as_list(row: dict, columns: list) -> list:
    """A row in asv's form: values in column order, trailing empty columns left out."""
    values = [row.get(column) for column in columns]
    while values and values[-1] is None:
        values.pop()
    return values


# --- A whole store -------------------------------------------------------------------------------------


def merge_tree(
    incoming_root: Path,
    target_root: Path,
    *,
    incoming_label: str,
    target_label: str,
    machines: list[str] | None = None,
    suite: str = "keep",
    gpu_only: bool = False,
    strict: bool = True,
    run: RunOnly | None = None,
) -> Merged:
    """Merge the store at ``incoming_root`` into the one at ``target_root`` (written in place).

    ``machines``: only these machine folders (default: every folder with a machine.json). ``suite``:
    ``keep`` or ``newest`` (module docstring). ``gpu_only``: machines whose machine.json names no GPU
    are left out, said in a line. ``strict``: a file that can't be read raises NotAResultFile before
    anything is written; otherwise it is left as it is and named in ``problems``. ``run``: only what
    that run measured is added, and nothing stored is replaced (module docstring; ``suite`` is then
    ``keep``)."""
    incoming, target = _Side(Path(incoming_root), incoming_label), _Side(Path(target_root), target_label)
    suite = "keep" if run is not None else suite  # a run's suite list never replaces the stored one
    merged, writes = Merged(), {}
    newest_overall = {"incoming": None, "target": None}
    for machine in machines if machines is not None else machines_in(incoming.root):
        if gpu_only and not _gpu(incoming.root / machine / MACHINE_FILE, merged, strict):
            merged.decisions.append(f"{machine}: left out, its machine.json names no GPU (GPU machines only)")
            continue
        if run is None:
            times = _merge_machine(machine, incoming, target, merged, writes, strict)
        else:
            times = _add_machine(machine, run, incoming, target, merged, writes, strict)
        for side in ("incoming", "target"):
            if _later(times[side], newest_overall[side]):
                newest_overall[side] = times[side]
    _merge_suite(incoming, target, suite, newest_overall, merged, writes, strict)
    for relative, data in writes.items():
        path = target.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return merged


def machines_in(root: Path) -> list[str]:
    """The machine folders of a store: those with a machine.json."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MACHINE_FILE).is_file())


def _gpu(machine_json: Path, merged: Merged, strict: bool) -> bool:
    try:
        return is_gpu_machine(machine_json)
    except NotAResultFile as error:
        if strict:
            raise
        merged.problems.append(str(error))
        return False


def _merge_machine(machine: str, incoming: _Side, target: _Side, merged: Merged, writes: dict, strict: bool) -> dict:
    """The machine's result files, then its machine.json. Returns each side's newest measurement of it."""
    theirs = _results_in(incoming.root / machine, merged, strict)
    mine = _results_in(target.root / machine, merged, strict)
    times = {"incoming": _newest_of(theirs), "target": _newest_of(mine)}
    for name, (doc, _) in theirs.items():
        relative = f"{machine}/{name}"
        if not (target.root / relative).exists():
            writes[relative] = (incoming.root / relative).read_bytes()
            merged.added.append(relative)
        elif mine.get(name) is not None:  # an unreadable copy there is left as it is (named already)
            _merge_file(relative, mine[name][0], doc, incoming, target, merged, writes, strict)
    _merge_machine_json(machine, incoming, target, times, merged, writes, strict)
    return times


def _results_in(folder: Path, merged: Merged, strict: bool) -> dict:
    """{file name: (document, rows)} of a machine folder's result files; None for one that can't be read."""
    found = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.name != MACHINE_FILE:
            found[path.name] = _load(path, merged, strict)
    return found


def _load(path: Path, merged: Merged, strict: bool) -> tuple[dict, dict] | None:
    try:
        return read_result(path)
    except NotAResultFile as error:
        if strict:
            raise
        merged.problems.append(str(error))
        return None


def _newest_of(results: dict) -> float | None:
    return newest(row for loaded in results.values() if loaded is not None for row in loaded[1].values())


def _merge_file(
    relative, kept, doc, incoming: _Side, target: _Side, merged: Merged, writes: dict, strict: bool, rule=merge_result
):
    try:
        result, lines = rule(kept, doc, relative, target.label, incoming.label)
    except NotAResultFile as error:
        if strict:
            raise
        merged.problems.append(str(error))
        return
    merged.decisions += lines
    if _canonical(result) != _canonical(kept):
        writes[relative] = json.dumps(result).encode()
        merged.changed.append(relative)


def _merge_machine_json(
    machine: str, incoming: _Side, target: _Side, times: dict, merged: Merged, writes: dict, strict: bool
) -> None:
    relative = f"{machine}/{MACHINE_FILE}"
    source, destination = incoming.root / relative, target.root / relative
    try:
        theirs = read_json(source)
        mine = read_json(destination) if destination.exists() else None
    except NotAResultFile as error:
        if strict:
            raise
        merged.problems.append(str(error))
        return
    if mine is None:
        writes[relative] = source.read_bytes()
        merged.added.append(relative)
        return
    if _canonical(theirs) == _canonical(mine):
        return
    incoming_wins = _later(times["incoming"], times["target"])
    winner, loser = (incoming, target) if incoming_wins else (target, incoming)
    won, lost = (theirs, mine) if incoming_wins else (mine, theirs)
    newest_time = times["incoming"] if incoming_wins else times["target"]
    merged.decisions.append(
        f"{relative}: {winner.label}'s is kept, beside the newest measurement ({_when(newest_time)}): "
        f"{_describe(won)}; {loser.label}'s: {_describe(lost)}"
    )
    if incoming_wins:
        writes[relative] = source.read_bytes()
        merged.changed.append(relative)


# --- A run's store: adds, never rewrites ------------------------------------------------------------


def _add_machine(
    machine: str, run: RunOnly, incoming: _Side, target: _Side, merged: Merged, writes: dict, strict: bool
) -> dict:
    """The machine's result files that ``run`` measured, added to the stored ones (module docstring),
    and its machine.json where there is none. Returns each side's newest measurement of it."""
    mine = _results_in(target.root / machine, merged, strict)
    try:
        described = read_json(incoming.root / machine / MACHINE_FILE)
    except NotAResultFile as error:
        if strict:
            raise
        merged.problems.append(str(error))
        return {"incoming": None, "target": _newest_of(mine)}
    if described.get("machine") != machine:
        merged.decisions.append(f"{machine}: left out, its machine.json names machine {described.get('machine')!r}")
        return {"incoming": None, "target": _newest_of(mine)}
    theirs = _of_run(machine, run, incoming, target, mine, merged, strict)
    times = {"incoming": _newest_of(theirs), "target": _newest_of(mine)}
    if not theirs:
        merged.decisions.append(f"{machine}: left out, no result of {run.about()}")
        return times
    for name, (doc, _) in theirs.items():
        relative = f"{machine}/{name}"
        if name not in mine:
            writes[relative] = (incoming.root / relative).read_bytes()
            merged.added.append(relative)
        elif mine[name] is not None:  # an unreadable copy there is left as it is (named already)
            _merge_file(relative, mine[name][0], doc, incoming, target, merged, writes, strict, rule=add_to_result)
    relative = f"{machine}/{MACHINE_FILE}"
    if not (target.root / relative).exists():
        writes[relative] = (incoming.root / relative).read_bytes()
        merged.added.append(relative)
    elif (incoming.root / relative).read_bytes() != (target.root / relative).read_bytes():
        merged.decisions.append(
            f"{relative}: {target.label}'s is kept, its results were measured under it; "
            f"{incoming.label}'s: {_describe(described)}"
        )
    return times


def _of_run(machine: str, run: RunOnly, incoming: _Side, target: _Side, mine: dict, merged: Merged, strict: bool):
    """{file name: (document, rows)} of the machine's uploaded result files of commits ``run`` measured.
    Every other one is left out, a line each; those the same as stored are counted in one line (a run
    uploads every result it fetched before measuring)."""
    # An unreadable stored copy counts as measured: it is never written over.
    stored_measured = {
        name[:8] for name, loaded in mine.items() if loaded is None or any(map(measured, loaded[1].values()))
    }
    runs = {commit[:8] for commit in run.commits}
    taken, same = {}, 0
    for path in sorted((incoming.root / machine).glob("*.json")):
        if path.name == MACHINE_FILE:
            continue
        named = RESULT_NAME.fullmatch(path.name)
        prefix = named.group(1) if named else None
        # Read only a file named for a commit taken: another commit's can't stop the store.
        if prefix is not None and (prefix in runs or (run.unmeasured and prefix not in stored_measured)):
            loaded = _load(path, merged, strict)
            if loaded is None:
                continue
            commit = loaded[0].get("commit_hash")
            if not (isinstance(commit, str) and commit.startswith(prefix)):
                error = NotAResultFile(f"{path}: named for commit {prefix}, but its commit_hash is {commit!r}")
                if strict:
                    raise error
                merged.problems.append(str(error))
                continue
            if commit in run.commits or (run.unmeasured and prefix not in stored_measured):
                taken[path.name] = loaded
                continue
        stored = target.root / machine / path.name
        if stored.is_file() and stored.read_bytes() == path.read_bytes():
            same += 1
        else:
            merged.decisions.append(f"{machine}/{path.name}: left out, not a result of {run.about()}")
    if same:
        merged.decisions.append(
            f"{machine}: {same} result files of other commits, the same as stored, left as they are"
        )
    return taken


def _describe(machine_info: dict) -> str:
    return str(machine_info.get("toolchain") or f"driver {machine_info.get('driver', 'unknown')}")


def _merge_suite(
    incoming: _Side, target: _Side, suite: str, times: dict, merged: Merged, writes: dict, strict: bool
) -> None:
    source, destination = incoming.root / SUITE_FILE, target.root / SUITE_FILE
    if not source.is_file():
        return
    try:
        read_json(source)  # a suite list that isn't JSON is never copied
    except NotAResultFile as error:
        if strict:
            raise
        merged.problems.append(str(error))
        return
    if not destination.exists():
        writes[SUITE_FILE] = source.read_bytes()
        merged.added.append(SUITE_FILE)
        return
    if suite == "keep" or source.read_bytes() == destination.read_bytes():
        return
    if _later(times["incoming"], times["target"]):
        writes[SUITE_FILE] = source.read_bytes()
        merged.changed.append(SUITE_FILE)
        merged.decisions.append(
            f"{SUITE_FILE}: {incoming.label}'s, beside the newest measurement, replaces {target.label}'s"
        )
    else:
        merged.decisions.append(f"{SUITE_FILE}: {target.label}'s is kept, beside the newest measurement")


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
