"""Run and sweep directories as their readers see them: a stage's stored config, its record, the
programs, the metrics and a sweep's points, every file read as untrusted data."""

from __future__ import annotations

from pathlib import Path

from gbcli.config.loading import read_stored_config
from gbcli.fs import layout
from gbcli.fs.layout import RunDir, SweepDir
from gbcli.fs.safe import is_dir, is_file, read_csv_untrusted, subdirs
from gbcli.store.records import GdRecord, ProgramRecord, SweepRecord, read_metrics


class RunView:
    """A run directory, or one point of a sweep."""

    def __init__(self, root: str | Path):
        self.dir = RunDir(root)
        self.root = self.dir.root

    def config(self, stage: str = layout.GD, strict: bool = False) -> dict | None:
        """A stage's (`gd` or an objective) raw stored config; None when not gb's, or `strict`: raised."""
        return read_stored_config(self.dir.gd_config if stage == layout.GD else self.dir.program_config(stage), strict)

    def any_config(self) -> dict | None:
        """The run's config: the GD stage's, else the first program's that reads."""
        return self.config() or next(filter(None, (self.config(s.name) for s in subdirs(self.dir.svm))), None)

    def gd(self) -> GdRecord | None:
        return GdRecord.read(self.dir.summary)

    def programs(self) -> dict[str, ProgramRecord]:
        """The programs' records that read as JSON objects, by objective (sorted)."""
        return {p.parent.name: r for p in self.dir.results() if (r := ProgramRecord.read(p)) is not None}

    def metrics(self):
        return read_metrics(self.dir.metrics)


class SweepView:
    """A sweep directory."""

    def __init__(self, root: str | Path):
        self.dir = SweepDir(root)
        self.root = self.dir.root

    def config(self) -> dict | None:
        return read_stored_config(self.dir.config)

    def record(self) -> SweepRecord | None:
        return SweepRecord.read(self.dir.record)

    def points(self, having: str = layout.SUMMARY) -> dict[str, RunView]:
        """The points whose `gd/<having>` is present (a link too: its readers refuse it), by id (sorted)."""
        return {pid: RunView(f.parent.parent) for pid, f in self.dir.gd_files(having).items()}

    def point(self, pid: str) -> RunView:
        return RunView(self.dir.point(pid).root)


def entries(folder: str | Path) -> list[Path]:
    """Every entry of `folder` but dot-files (sorted), links and files too: the strict listing `gb verify` walks,
    refusing each with its reason, where `points()` and `programs()` pass them by."""
    return sorted(p for p in Path(folder).iterdir() if not p.name.startswith(".")) if is_dir(folder) else []


def point_names(out_dir: str | Path) -> dict[str, str]:
    """point id -> its readable name in the sweep's `tables/points.csv`; empty when that is missing or damaged."""
    path = SweepDir(out_dir).points_table
    if not is_file(path):
        return {}
    try:
        frame = read_csv_untrusted(path, dtype=str)   # ids of digits only stay text
        return {str(p): n for p, n in zip(frame["point"], frame["name"]) if isinstance(n, str) and n}   # no "nan"
    except Exception:   # noqa: BLE001 (a damaged or older table: the points keep their ids)
        return {}
