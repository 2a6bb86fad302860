"""The one rule for merging two copies of an asv results store so that no measured value is lost, for
``store.py`` and ``results_branch.py``; every choice is one line. The rules and why:
docs/performance-history.md, "The store's guarantees"; why standard library only: docs/harness-code.md.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from harness.core.asv_files import read_asv_result, read_machine
from harness.core.schema import RecordError, Where, an_object, read_json

SUITE_FILE = "benchmarks.json"
MACHINE_FILE = "machine.json"
RESULT_NAME = re.compile(r"([0-9a-f]{8})-.+\.json")  # asv's <commit8>-<env>.json


@dataclass
class Merged:
    """What a merge did, paths relative to the target store."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)  # a line per choice between two differing copies
    problems: list[str] = field(default_factory=list)  # files left alone: they can't be read

    @property
    def written(self) -> int:
        return len(self.added) + len(self.changed)

    def lines(self, name=str) -> list[str]:
        """Every choice made, then every file added and changed, each as ``name(relative path)``."""
        return [
            *self.decisions,
            *(f"added {name(relative)}" for relative in self.added),
            *(f"changed {name(relative)}" for relative in self.changed),
        ]


@dataclass(frozen=True)
class RunOnly:
    """What a run's store takes (its upload ran the merged kernel's code): the result files of
    ``commits`` and, with ``unmeasured`` (the nightly backfill), of any commit with none measured stored."""

    commits: frozenset[str] = frozenset()
    unmeasured: bool = False

    def about(self) -> str:
        """What it takes, in the lines: ``0c0c0c0c0c0c, the commit this run measured``."""
        named = ", ".join(sorted(commit[:12] for commit in self.commits))
        unmeasured = "a commit with no measured value stored"
        if not self.unmeasured:
            return f"{named}, the commit{'s' if len(self.commits) > 1 else ''} this run measured"
        return f"{named} or {unmeasured}" if named else unmeasured


def rows_of(doc: dict) -> dict[str, dict]:
    return {name: dict(zip(doc["result_columns"], row, strict=False)) for name, row in doc["results"].items()}


def started(row: dict) -> float | None:
    value = row.get("started_at")
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def measured(row: dict) -> bool:
    """At least one number among the row's values (asv writes None for a failure, NaN for a skip)."""
    values = row.get("result")
    values = values if isinstance(values, list) else [values]
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) for v in values)


def newest(rows) -> float | None:
    times = [t for t in map(started, rows) if t is not None]
    return max(times) if times else None


def _later(a: float | None, b: float | None) -> bool:
    """a is later than b (a time is later than none)."""
    return a is not None and (b is None or a > b)


def _when(ms: float | None) -> str:
    return "no start time" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


def choose_row(kept: dict, incoming: dict, kept_label: str, incoming_label: str, add_only: bool) -> tuple[bool, str]:
    """(True if ``incoming`` wins, why) for two differing rows of one benchmark."""
    if measured(kept) != measured(incoming):
        wins = measured(incoming)
        winner, loser = (incoming_label, kept_label) if wins else (kept_label, incoming_label)
        return wins, f"{winner}'s row measured values, {loser}'s none"
    if add_only:
        return False, f"{kept_label}'s row is kept: a stored figure is never replaced"
    t_kept, t_incoming = started(kept), started(incoming)
    if t_kept == t_incoming:
        return False, f"{kept_label}'s row is kept: both started {_when(t_kept)} (the copy already there stays)"
    wins = _later(t_incoming, t_kept)
    new, old = [(incoming_label, t_incoming), (kept_label, t_kept)][:: 1 if wins else -1]
    return wins, f"{new[0]}'s measurement wins, the newer: started {_when(new[1])}, {old[0]}'s {_when(old[1])}"


def merge_result(
    kept: dict, incoming: dict, where: str, kept_label: str, incoming_label: str, add_only: bool = False
) -> tuple[dict, list[str]]:
    """One result file from two checked copies of it: (the document, a line per decision). The file's
    own fields come from the copy with the newest measurement; ``add_only`` keeps ``kept``'s fields
    and every row of it that measured something."""
    for key in ("commit_hash", "env_name"):
        if kept[key] != incoming[key]:
            raise RecordError(where, "", f"{kept_label} and {incoming_label} disagree on {key}: not one file")
    kept_rows, incoming_rows = rows_of(kept), rows_of(incoming)
    incoming_first = not add_only and _later(newest(incoming_rows.values()), newest(kept_rows.values()))
    first, second = (incoming, kept) if incoming_first else (kept, incoming)
    chosen, lines = {}, []
    for name in {**kept_rows, **incoming_rows}:
        mine, theirs = kept_rows.get(name), incoming_rows.get(name)
        if mine is None or theirs is None or _canonical(mine) == _canonical(theirs):
            chosen[name] = theirs if mine is None else mine
            continue
        incoming_wins, why = choose_row(mine, theirs, kept_label, incoming_label, add_only)
        chosen[name] = theirs if incoming_wins else mine
        lines.append(f"{where} {name}: {why}")
    columns = [*first["result_columns"], *(c for c in second["result_columns"] if c not in first["result_columns"])]
    merged = {**({} if add_only else second), **first, "result_columns": columns}
    merged["results"] = {name: _as_list(row, columns) for name, row in chosen.items()}
    durations = {**second.get("durations", {}), **first.get("durations", {})}
    if durations or "durations" in merged:
        merged["durations"] = durations
    return merged, lines


def _as_list(row: dict, columns: list) -> list:
    """A row in asv's form: values in column order, trailing empty columns left out."""
    values = [row.get(column) for column in columns]
    while values and values[-1] is None:
        values.pop()
    return values


def machines_in(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / MACHINE_FILE).is_file()) if root.is_dir() else []


def is_gpu_machine(machine_dir: Path) -> bool:
    return read_machine(Path(machine_dir) / MACHINE_FILE).get("gpu", "none") not in ("none", "")


def gpu_machines(root: Path) -> list[str]:
    """The machine folders of a store whose machine.json names a GPU; RecordError for one that isn't asv's."""
    return [name for name in machines_in(Path(root)) if is_gpu_machine(Path(root) / name)]


def _describe(machine_info: dict) -> str:
    return str(machine_info.get("toolchain") or f"driver {machine_info.get('driver', 'unknown')}")


def merge_tree(
    incoming_root: Path,
    target_root: Path,
    *,
    incoming_label: str,
    target_label: str,
    machines: list[str] | None = None,
    suite: str = "keep",
    strict: bool = True,
    run: RunOnly | None = None,
) -> Merged:
    """Merge the store at ``incoming_root`` into ``target_root``, written once every file is decided.
    ``machines``: only these (default: each with a machine.json). ``suite``: benchmarks.json ``keep``s
    the target's or comes from the ``newest`` measurement's copy. ``strict``: an unreadable file
    raises RecordError before anything is written, else is named in ``problems``. ``run``: a run's
    store (``RunOnly``), GPU machines only, adding only, its suite kept."""
    merge = _Merge(Path(incoming_root), Path(target_root), incoming_label, target_label, strict, run)
    newest_of = {"incoming": None, "target": None}
    for machine in machines if machines is not None else machines_in(merge.incoming):
        if run is not None and not merge.read(is_gpu_machine, merge.incoming / machine):
            merge.out.decisions.append(f"{machine}: left out, its machine.json names no GPU (GPU machines only)")
            continue
        for side, time in merge.machine(machine).items():
            if _later(time, newest_of[side]):
                newest_of[side] = time
    merge.suite("keep" if run is not None else suite, newest_of)
    for relative, data in merge.writes.items():
        path = merge.target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return merge.out


@dataclass
class _Merge:
    incoming: Path
    target: Path
    incoming_label: str
    target_label: str
    strict: bool
    run: RunOnly | None
    out: Merged = field(default_factory=Merged)
    writes: dict[str, bytes] = field(default_factory=dict)

    def fail(self, error: RecordError) -> None:
        """A file that can't be read or merged: raised when strict, else left as it is and named."""
        if self.strict:
            raise error
        self.out.problems.append(str(error))

    def read(self, reader, path: Path):
        """``reader(path)``, or None for a file that can't be read (not strict)."""
        try:
            return reader(path)
        except RecordError as error:
            self.fail(error)
            return None

    def copy(self, relative: str, into: list[str]) -> None:
        self.writes[relative] = (self.incoming / relative).read_bytes()
        into.append(relative)

    def results(self, folder: Path) -> dict[str, dict | None]:
        """{file name: document} of a machine folder's result files; None for one that can't be read."""
        paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
        return {path.name: self.read(read_asv_result, path) for path in paths if path.name != MACHINE_FILE}

    def machine(self, machine: str) -> dict[str, float | None]:
        """The machine's result files, then its machine.json. Returns each side's newest measurement."""
        mine = self.results(self.target / machine)
        times = {"target": _newest(mine), "incoming": None}
        theirs_json = None
        if self.run is None:
            theirs = self.results(self.incoming / machine)
        else:
            theirs_json = self.read(read_machine, self.incoming / machine / MACHINE_FILE)
            if theirs_json is None:
                return times
            if theirs_json["machine"] != machine:  # asv's site takes the description from this field
                self.out.decisions.append(
                    f"{machine}: left out, its machine.json names machine {theirs_json['machine']!r}"
                )
                return times
            theirs = self.of_run(machine, mine)
            if not theirs:
                self.out.decisions.append(f"{machine}: left out, no result of {self.run.about()}")
                return times
        times["incoming"] = _newest(theirs)
        for name, doc in theirs.items():
            relative = f"{machine}/{name}"
            if doc is None:
                continue
            if not (self.target / relative).exists():
                self.copy(relative, self.out.added)
            elif mine.get(name) is not None:  # an unreadable stored copy is left as it is (named already)
                self.result_file(relative, mine[name], doc)
        self.machine_json(machine, times, theirs_json)
        return times

    def result_file(self, relative: str, kept: dict, doc: dict) -> None:
        add_only = self.run is not None
        try:
            result, lines = merge_result(kept, doc, relative, self.target_label, self.incoming_label, add_only)
        except RecordError as error:
            self.fail(error)
            return
        self.out.decisions += lines
        if _canonical(result) != _canonical(kept):
            self.writes[relative] = json.dumps(result).encode()
            self.out.changed.append(relative)

    def of_run(self, machine: str, mine: dict) -> dict[str, dict]:
        """The uploaded result files of commits the run measured. Every other one is left out, a line
        each; those the same as stored are counted in one line (a run uploads every result it fetched
        before measuring)."""
        # An unreadable stored copy counts as measured: it is never written over.
        stored_measured = {
            name[:8] for name, doc in mine.items() if doc is None or any(map(measured, rows_of(doc).values()))
        }
        prefixes = {commit[:8] for commit in self.run.commits}
        taken, same = {}, 0
        for path in sorted((self.incoming / machine).glob("*.json")):
            if path.name == MACHINE_FILE:
                continue
            named = RESULT_NAME.fullmatch(path.name)
            prefix = named.group(1) if named else None
            unmeasured = self.run.unmeasured and prefix not in stored_measured
            # Only a file named for a commit taken is read: another commit's can't stop the store.
            if prefix is not None and (prefix in prefixes or unmeasured):
                doc = self.read(read_asv_result, path)
                if doc is None:
                    continue
                if not doc["commit_hash"].startswith(prefix):
                    why = f"named for commit {prefix}, but its commit_hash is {doc['commit_hash']!r}"
                    self.fail(RecordError(path, "", why))
                    continue
                if doc["commit_hash"] in self.run.commits or unmeasured:
                    taken[path.name] = doc
                    continue
            stored = self.target / machine / path.name
            if stored.is_file() and stored.read_bytes() == path.read_bytes():
                same += 1
            else:
                self.out.decisions.append(f"{machine}/{path.name}: left out, not a result of {self.run.about()}")
        if same:
            self.out.decisions.append(
                f"{machine}: {same} result files of other commits, the same as stored, left as they are"
            )
        return taken

    def machine_json(self, machine: str, times: dict, theirs: dict | None) -> None:
        """A run's store keeps the stored one (its results were measured under it); otherwise the one
        beside the newest measurement wins."""
        relative = f"{machine}/{MACHINE_FILE}"
        theirs = theirs or self.read(read_machine, self.incoming / relative)  # one that isn't asv's is never copied
        if theirs is None:
            return
        if not (self.target / relative).exists():
            self.copy(relative, self.out.added)
            return
        if self.run is not None:
            if (self.incoming / relative).read_bytes() != (self.target / relative).read_bytes():
                self.out.decisions.append(
                    f"{relative}: {self.target_label}'s is kept, its results were measured under it; "
                    f"{self.incoming_label}'s: {_describe(theirs)}"
                )
            return
        mine = self.read(read_machine, self.target / relative)
        if mine is not None and _canonical(theirs) != _canonical(mine):
            incoming_wins = _later(times["incoming"], times["target"])
            (winner, won, when), (loser, lost, _) = [
                (self.incoming_label, theirs, times["incoming"]),
                (self.target_label, mine, times["target"]),
            ][:: 1 if incoming_wins else -1]
            self.out.decisions.append(
                f"{relative}: {winner}'s is kept, beside the newest measurement ({_when(when)}): "
                f"{_describe(won)}; {loser}'s: {_describe(lost)}"
            )
            if incoming_wins:
                self.copy(relative, self.out.changed)

    def suite(self, rule: str, times: dict) -> None:
        source, destination = self.incoming / SUITE_FILE, self.target / SUITE_FILE
        if not source.is_file() or self.read(lambda path: an_object(read_json(path), Where(str(path))), source) is None:
            return  # a suite list that isn't a JSON object is never copied
        if not destination.exists():
            self.copy(SUITE_FILE, self.out.added)
        elif rule == "newest" and source.read_bytes() != destination.read_bytes():
            if _later(times["incoming"], times["target"]):
                self.copy(SUITE_FILE, self.out.changed)
                self.out.decisions.append(
                    f"{SUITE_FILE}: {self.incoming_label}'s, beside the newest measurement, replaces "
                    f"{self.target_label}'s"
                )
            else:
                self.out.decisions.append(f"{SUITE_FILE}: {self.target_label}'s is kept, beside the newest measurement")


def _newest(results: dict[str, dict | None]) -> float | None:
    return newest(row for doc in results.values() if doc is not None for row in rows_of(doc).values())
