"""Old engine against new: the same inputs give the same output bytes, or the same quarantine reason.

    .venv/bin/python benchmarks/deid_identical.py [--ref 9719aec] [--mutants 600]

The engine as it was at `--ref` (imaging/deid from git, loaded as a separate package; everything else
is today's) and the working tree's engine each de-identify every input from a fresh read, under three
profiles (the research default, the basic profile, every option but modified dates), OCR stubbed out
(both engines get the same stand-in: the pixel-text check is not what is compared). Inputs: pydicom's
and pydicom-data's files on disk (as tests/test_deid_sweep.py finds them), a seeded corpus of their
mutants (tests/fuzz_corpus.py: truncated, flipped VRs, undefined lengths, deep sequences, bad character
sets, wrong pixel lengths, lying frame counts) and the synthetic hospital (synth, with its broken files).
Prints the counts and every difference (file and profile only, never a value); exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from pydicom import dcmread  # noqa: E402

from imaging.deid import NotDeidentifiable, quiet  # noqa: E402
from imaging.pseudonym import Pseudonymizer  # noqa: E402

PROFILES = {
    "default": None,
    "basic": [],
    "all-options": ["clean_graphics", "clean_structured_content", "clean_descriptors",
                    "retain_longitudinal_full_dates", "retain_patient_characteristics", "retain_device_identity",
                    "retain_uids", "retain_safe_private", "retain_institution_identity"],
}
EXTRA = ("Jane Smith", "9434765919")  # what a clinical extract adds (anonymize.py passes its identifiers)


class ReadsNothing:
    """Stand-in detector: no text found, nothing read (both engines get it)."""

    def check(self, ds, syntax, frames=None):
        from imaging.deid.pixel_text import PixelTextResult

        return PixelTextResult(found=False, frames_checked=0)


def engine_at(ref: str, folder: Path):
    """imaging/deid as it was at `ref`, imported as the package `deid_at_ref` (its relative imports
    resolve inside it; `imaging.*` outside deid is today's)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "imaging/deid"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    package = folder / "imaging" / "deid"
    spec = importlib.util.spec_from_file_location("deid_at_ref", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["deid_at_ref"] = module
    spec.loader.exec_module(module)
    return module


def outcome(engine, data: bytes, profile, p) -> str | bytes:
    """The output bytes, or "quarantined: <reason>", or "unreadable"."""
    try:
        with quiet():
            ds = dcmread(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - the same for both engines
        return "unreadable"
    try:
        out = engine.deidentify(ds, pseudonymizer=p, namespace="NHS", profile=profile,
                                extra_identifiers=EXTRA, pixel_text=ReadsNothing())
        return engine.to_bytes(out)
    except NotDeidentifiable as q:
        return f"quarantined: {q}"
    except Exception as error:  # noqa: BLE001 - the old engine's own NotDeidentifiable class
        if type(error).__name__ == "NotDeidentifiable":
            return f"quarantined: {error}"
        return f"error: {type(error).__name__}"


def inputs(folder: Path, mutants: int) -> list[tuple[str, bytes]]:
    from fuzz_corpus import mutants as make_mutants
    from fuzz_corpus import source_files

    from synth import generate_hospital

    found = [(s.label, Path(s.path).read_bytes()) for s in source_files()]
    for i, (mutant, data) in enumerate(make_mutants()):
        if i >= mutants:
            break
        found.append((f"mutant/{mutant.name}", data))
    hospital = folder / "hospital"
    generate_hospital(hospital, seed=3, sites=("site-a", "site-b"), dates=("2024-03-01", "2024-03-02"),
                      patients_per_site=4)
    found += [(f"synth/{p.relative_to(hospital)}", p.read_bytes()) for p in sorted(hospital.rglob("*"))
              if p.is_file() and p.suffix.lower() in (".dcm", "")]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="9719aec", help="the commit whose engine is the reference")
    parser.add_argument("--mutants", type=int, default=600)
    args = parser.parse_args()
    import imaging.deid as new

    p = Pseudonymizer("identical-key")
    with tempfile.TemporaryDirectory(prefix="deid-identical-") as tmp:
        old = engine_at(args.ref, Path(tmp) / "ref")
        files = inputs(Path(tmp), args.mutants)
        counts, differences = Counter(), []
        for name, options in PROFILES.items():
            old_profile, new_profile = old.load_profile(options), new.load_profile(options)
            for label, data in files:
                a, b = outcome(old, data, old_profile, p), outcome(new, data, new_profile, p)
                kind = "published" if isinstance(a, bytes) else a.split(":")[0]
                counts[f"{kind} {'same' if a == b else 'DIFFERENT'}"] += 1
                if a != b:
                    differences.append(f"{name}: {label} ({kind} before, "
                                       f"{'published' if isinstance(b, bytes) else b.split(':')[0]} now)")
    print(f"{len(files)} inputs x {len(PROFILES)} profiles, reference {args.ref}: {dict(sorted(counts.items()))}")
    for line in differences:
        print("  DIFFERENT", line)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
