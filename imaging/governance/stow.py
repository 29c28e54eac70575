"""imaging-stow: send a published, approved release's images to a research PACS by STOW-RS.

    python -m imaging.governance.stow <release folder> --to research    (or the `imaging-stow` script)

Only what a reviewer would call VERIFIED leaves: the release is reviewed first (`imaging.governance.review`:
checksums, data card, the required signed approvals of exactly this release id) and it must be published (under
`deidentified/cohorts/`); anything else is refused and nothing is sent. The images go as they are in the release
(their bytes, read once and posted in batches of `--batch`), so the research PACS holds byte for byte what was
approved. The target is named like a PACS site: `IMAGING_PACS_<NAME>_URL` (its DICOMweb root) and its
credentials `IMAGING_PACS_<NAME>_TOKEN`, or `_USER` and `_PASSWORD`; retries, backoff and time-out from
platform/pacs.yaml. Output: counts only (sent, stored, failed by reason); exit 0 when every image was stored.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from imaging.pacs.connection import InstanceFailed, PacsError, PacsServer, RetryPolicy, credentials_from_env, env_name
from imaging.pacs.dicomweb import connect, http_failure

PUBLISHED = "published"


class StowRefused(RuntimeError):
    """The release may not be sent (not published, or not VERIFIED); the message says why."""


@dataclass(frozen=True)
class StowResult:
    sent: int
    stored: int
    failed: int
    reasons: dict[str, int] = field(default_factory=dict)


def release_images(root: str) -> list[Path]:
    """The release's DICOM images, in a stable order."""
    return sorted(Path(root, "images").rglob("*.dcm"))


def stow(release: str, server: PacsServer, policy: RetryPolicy, *, warehouse: str | None = None,
         batch: int = 16) -> StowResult:
    """Review `release`; if it is published and VERIFIED, post its images to `server` by STOW-RS."""
    from dicomweb_client.web import _Transaction

    from imaging.governance.review import VERIFIED, review

    result = review(release, warehouse)
    if result.state != PUBLISHED or result.verdict != VERIFIED:
        raise StowRefused(f"the release is {result.state}, {result.verdict}: only a published, VERIFIED release "
                          f"(imaging-review) is sent; nothing was sent")
    images = release_images(result.root)
    client = connect(server, policy)
    url = client._get_studies_url(_Transaction.STORE)
    stored, reasons = 0, {}
    for start in range(0, len(images), batch):
        chunk = [p.read_bytes() for p in images[start:start + batch]]
        try:
            response, _ = policy.call(server.site, lambda: client._http_post_multipart_application_dicom(url, chunk),
                                      per_instance=True, classify=http_failure)
        except InstanceFailed as failed:  # the whole batch refused (e.g. HTTP 409): counted, the rest still sent
            reasons[failed.reason] = reasons.get(failed.reason, 0) + len(chunk)
            continue
        refused = len(getattr(response, "FailedSOPSequence", []) or [])
        if refused:
            reasons["refused by the research PACS (FailedSOPSequence)"] = \
                reasons.get("refused by the research PACS (FailedSOPSequence)", 0) + refused
        stored += len(chunk) - refused
    return StowResult(len(images), stored, len(images) - stored, reasons)


def main(argv: list[str] | None = None) -> int:
    from imaging.deid.quiet import silence_for_process

    silence_for_process()  # released headers are read: no library warning quotes a value
    parser = argparse.ArgumentParser(prog="imaging-stow", description=__doc__.splitlines()[0])
    parser.add_argument("release", help="a published release folder (deidentified/cohorts/<name>/v<N>)")
    parser.add_argument("--to", required=True, help="the research PACS' name: IMAGING_PACS_<NAME>_URL and credentials")
    parser.add_argument("--batch", type=int, default=16, help="images per STOW-RS request")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from imaging.config_files import load_as
    from imaging.pacs.settings import PacsFile

    url = os.environ.get(env_name(args.to, "URL"), "").strip()
    if not url.startswith(("http://", "https://")) or "@" in url.split("/")[2]:
        parser.error(f"set {env_name(args.to, 'URL')} to the research PACS' DICOMweb root (credentials apart)")
    settings = load_as(PacsFile, "pacs.yaml")
    policy = RetryPolicy(settings.retries, settings.backoff_seconds, settings.timeout_seconds)
    try:
        server = PacsServer(args.to, url.rstrip("/"), credentials_from_env(args.to, None))
        done = stow(args.release, server, policy, warehouse=os.environ.get("IMAGING_WAREHOUSE") or None,
                    batch=args.batch)
    except (StowRefused, PacsError) as error:
        print(f"imaging-stow: {error}", file=sys.stderr)
        return 1
    print(f"sent {done.sent} images: {done.stored} stored, {done.failed} failed")
    for reason, count in sorted(done.reasons.items()):
        print(f"  {count} {reason}")
    return 0 if done.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
