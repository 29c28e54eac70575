"""The raw-element engine against the reference engine on every corpus: the same dataset or the same reason.

    .venv/bin/python benchmarks/deid_differential.py [--mutants N] [--profiles default,basic,all-options]
                                                      [--dciodvfy] [--show 20]
    FUZZ_FILES=all .venv/bin/python benchmarks/deid_differential.py     # every mutant (10,167 files)

Inputs: pydicom's and pydicom-data's test files (tests/fuzz_corpus.py finds them on disk, never downloads),
their mutants (the first `--mutants`, default 600, or all with FUZZ_FILES=all), the synthetic hospital (two
sites, two days, with its broken files) and the planted files (tests/test_deid_planted.py: a traceable value in
every attribute of Table E.1-1, nested, in private blocks, overlays and curves; explicit and implicit VR). Each
file is de-identified by the reference (tests/deid_reference: the per-file path before issue 48, pydicom reading
the header and writing it back) and by the shipped one (the raw reader, the walk, the one writer), under each profile,
OCR stubbed out for both. Printed: counts by outcome, every difference (file, profile, where; never a value),
whether the shipped path's input sha256 is the file's, and with `--dciodvfy` the dciodvfy errors only a shipped
output has (against the reference output of the same file). Exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from deid_reference.differential import PROFILES, differences, reference, shipped  # noqa: E402
from imaging.deid import load_profile  # noqa: E402


def inputs(folder: Path, mutants: int | None) -> list[tuple[str, str]]:
    """(label, path) of every input, written under `folder` where they are made."""
    from fuzz_corpus import mutants as make_mutants
    from fuzz_corpus import source_files
    from synth import generate_hospital
    from test_deid_planted import planted
    from pydicom.uid import ExplicitVRLittleEndian, ImplicitVRLittleEndian

    found = [(s.label, s.path) for s in source_files()]
    for i, (mutant, data) in enumerate(make_mutants()):
        if mutants is not None and i >= mutants:
            break
        path = folder / "mutants" / f"{i}.dcm"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        found.append((f"mutant/{mutant.name}", str(path)))
    hospital = folder / "hospital"
    generate_hospital(hospital, seed=3, sites=("site-a", "site-b"), dates=("2024-03-01", "2024-03-02"),
                      patients_per_site=4)
    found += [(f"synth/{p.relative_to(hospital)}", str(p)) for p in sorted(hospital.rglob("*"))
              if p.is_file() and p.suffix.lower() in (".dcm", "")]
    for name, syntax in (("explicit", ExplicitVRLittleEndian), ("implicit", ImplicitVRLittleEndian)):
        path = folder / f"planted-{name}.dcm"
        path.write_bytes(planted(syntax)[0])
        found.append((f"planted/{name}", str(path)))
    return found


def dciodvfy_errors(data: bytes, folder: Path) -> set[str]:
    import re

    path = folder / "check.dcm"
    path.write_bytes(data)
    result = subprocess.run(["dciodvfy", str(path)], capture_output=True, text=True, timeout=120)
    lines = (result.stderr + result.stdout).splitlines()
    return {re.sub(r"<(?![A-Za-z][A-Za-z0-9]*>)[^<>]*>", "<>", re.sub(r"\[\d+\]", "[]", line))
            for line in lines if line.startswith("Error")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=600)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--dciodvfy", action="store_true")
    parser.add_argument("--show", type=int, default=40)
    args = parser.parse_args()
    everything = os.environ.get("FUZZ_FILES") == "all"
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="deid-differential-") as tmp:
        files = inputs(Path(tmp), None if everything else args.mutants)
        counts, different, hashes, new_errors = Counter(), [], 0, []
        for name in args.profiles.split(","):
            profile = load_profile(PROFILES[name])
            for label, path in files:
                data = Path(path).read_bytes()
                want, got = reference(path, profile), shipped(path, profile)
                found = differences(want, got)
                counts[f"{want.kind} {'same' if not found else 'DIFFERENT'}"] += 1
                counts["streamed"] += got.streamed
                if got.sha256 is not None and got.sha256 != hashlib.sha256(data).hexdigest():
                    hashes += 1
                if found:
                    different.append((name, label, found))
                elif args.dciodvfy and want.kind == "published" and not label.startswith("mutant/"):
                    extra = dciodvfy_errors(got.value, Path(tmp)) - dciodvfy_errors(want.value, Path(tmp))
                    if extra:
                        new_errors.append((name, label, sorted(extra)))
    print(f"{len(files)} inputs x {len(args.profiles.split(','))} profiles in {time.time() - started:.0f} s: "
          f"{dict(sorted(counts.items()))}; input sha256 wrong: {hashes}")
    by_where = Counter(where.split(" ")[0] + " " + what for _, _, found in different for where, what in found)
    print("differences by kind:", dict(by_where.most_common()))
    for name, label, found in different[:args.show]:
        print(f"  DIFFERENT {name}: {label}: {found[:4]}{' ...' if len(found) > 4 else ''}")
    if args.dciodvfy:
        print(f"dciodvfy errors only a shipped output has: {len(new_errors)}")
        for name, label, extra in new_errors[:args.show]:
            print(f"  NEW ERROR {name}: {label}: {extra[:3]}")
    return 1 if different or hashes or new_errors else 0


if __name__ == "__main__":
    sys.exit(main())
