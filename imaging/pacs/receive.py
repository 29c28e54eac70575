"""imaging-receive: the C-STORE receiver (a storage SCP), a long-lived service beside the Dagster daemon.

    imaging-receive            # platform/pacs.yaml `receiver`; IMAGING_LANDING, IMAGING_WAREHOUSE, IMAGING_SITES

It accepts associations only from the senders listed in `receiver.senders` (AE title and addresses; a
connection from any other address is closed before a byte is read, an unlisted calling AE title is rejected,
and a listed AE title calling from another sender's address is refused per instance), and stores what it is
sent in one of two places:

- a push from a sender with a `site`: into the landing folder, `images/<site>/<date>/<digest>.dcm`, the date
  from the instance's StudyDate (exactly YYYYMMDD, a real date, or the instance is refused) and the name a
  digest of its UIDs: no header value becomes a path. The landing sensor picks the site-day up as it does any
  landed file;
- an answer to one of our C-MOVEs (the request names a DIMSE site's calling AE title as its move
  originator, and the sender is that site's PACS): into the retrieval spool, under the same digest, where the
  executor that asked takes it (imaging/pacs/dimse.py).

Every file is written under a temporary name, flushed to disk (fsync), renamed into place and its folder
flushed before success is answered: a sender told "stored" can forget the instance. The same instance sent
again with the same bytes changes nothing (not even the file's time); with other bytes it replaces the file.
What cannot be stored is answered with the DIMSE status that says why, and logged with the sender's AE title
and a fixed reason: never a value from the file.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import ipaddress
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from imaging.pacs.connection import C_MOVE
from imaging.pacs.dimse import no_delay, part10
from imaging.pacs.records import file_name, iso_date
from imaging.pacs.retrieval import is_uid
from imaging.pacs.settings import PacsSettings, ReceiverFile

LOG = logging.getLogger("imaging.receive")

SUCCESS = 0x0000
NOT_AUTHORIZED = 0x0124  # PS3.7 C.4.2.1.4: Refused, not authorized
OUT_OF_RESOURCES = 0xA700
DOES_NOT_MATCH = 0xA900  # Error: data set does not match SOP class (here: not the instance the request names)
CANNOT_UNDERSTAND = 0xC000
TEMP_FOLDER = ".imaging-receive"  # beside images/ in the landing root: never read as a landed file
SPOOL_HOURS = 24  # spooled C-MOVE answers no retrieval took (a run that died) are removed after this


@dataclass(frozen=True)
class Sender:
    ae_title: str
    networks: tuple
    site: str | None

    def calls_from(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)


@dataclass
class Tally:
    stored: int = 0
    unchanged: int = 0
    refused: dict = field(default_factory=dict)


class Receiver:
    """What to accept and where to store it; `store` is the C-STORE handler."""

    def __init__(self, config: ReceiverFile, pacs: PacsSettings, landing: str, spool: str):
        self.config = config
        self.landing, self.spool = landing, spool
        self.senders = tuple(Sender(s.ae_title, tuple(ipaddress.ip_network(a, strict=False) for a in s.addresses),
                                    s.site) for s in config.senders)
        moving = [e.dimse for e in pacs.endpoints.values() if e.dimse is not None and e.dimse.retrieve == C_MOVE]
        self.move_originators = {d.calling_ae for d in moving}  # our AE titles that issue C-MOVEs
        self.move_sources = {d.called_ae for d in moving}  # the PACS that answer them
        self.tallies: dict[int, Tally] = {}
        self.lock = threading.Lock()
        self.last_sweep = 0.0

    # --- who may send ---------------------------------------------------------------------------------------

    def address_allowed(self, address: str) -> bool:
        return any(s.calls_from(address) for s in self.senders)

    def sender(self, ae_title: str, address: str) -> Sender | None:
        return next((s for s in self.senders if s.ae_title == ae_title and s.calls_from(address)), None)

    # --- C-STORE --------------------------------------------------------------------------------------------

    def refuse(self, event, status: int, ae_title: str, reason: str) -> int:
        LOG.warning("refused an instance from AE %s: %s (status 0x%04X)", ae_title, reason, status)
        with self.lock:
            tally = self.tallies.setdefault(id(event.assoc), Tally())
            tally.refused[reason] = tally.refused.get(reason, 0) + 1
        return status

    def store(self, event) -> int:
        requestor = event.assoc.requestor
        ae_title, address = str(requestor.ae_title).strip(), str(requestor.address)
        sender = self.sender(ae_title, address)
        if sender is None:
            return self.refuse(event, NOT_AUTHORIZED, ae_title, "AE title not listed for the address it calls from")
        request = event.request
        sop, sop_class = str(request.AffectedSOPInstanceUID), str(request.AffectedSOPClassUID)
        if not is_uid(sop) or not is_uid(sop_class):
            return self.refuse(event, CANNOT_UNDERSTAND, ae_title, "malformed SOP UID in the request")
        try:
            data = part10(event.encoded_dataset(include_meta=False), sop_class, sop, str(event.context.transfer_syntax))
            header = _header(data)
        except Exception:  # noqa: BLE001 - an unreadable data set, whatever the fault
            return self.refuse(event, CANNOT_UNDERSTAND, ae_title, "data set cannot be read")
        study, series, own = (header.get(k) for k in ("StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID"))
        if own != sop:
            return self.refuse(event, DOES_NOT_MATCH, ae_title, "data set is not the instance the request names")
        if not is_uid(study) or not is_uid(series):
            return self.refuse(event, CANNOT_UNDERSTAND, ae_title, "missing or malformed study or series UID")
        name = file_name(study, series, sop)
        originator = str(getattr(request, "MoveOriginatorApplicationEntityTitle", "") or "").strip()
        if originator:
            if originator not in self.move_originators or ae_title not in self.move_sources:
                return self.refuse(event, NOT_AUTHORIZED, ae_title, "C-MOVE answer for a move we did not ask")
            root, relative = self.spool, name
        else:
            if sender.site is None:
                return self.refuse(event, NOT_AUTHORIZED, ae_title, "sender has no site to push to")
            date = iso_date(header.get("StudyDate"))
            if date is None:
                return self.refuse(event, CANNOT_UNDERSTAND, ae_title, "missing or invalid StudyDate")
            root, relative = self.landing, f"images/{sender.site}/{date}/{name}"
        try:
            changed = write_durably(root, relative, data)
        except OSError:
            return self.refuse(event, OUT_OF_RESOURCES, ae_title, "could not write the file")
        with self.lock:
            tally = self.tallies.setdefault(id(event.assoc), Tally())
            if changed:
                tally.stored += 1
            else:
                tally.unchanged += 1
        return SUCCESS

    def ended(self, event) -> None:
        """An association's summary, by AE title and counts only."""
        with self.lock:
            tally = self.tallies.pop(id(event.assoc), None)
        if tally is not None:
            refused = ", ".join(f"{n} {r}" for r, n in sorted(tally.refused.items())) or "none"
            LOG.info("association from AE %s ended: %d stored, %d unchanged, refused: %s",
                     str(event.assoc.requestor.ae_title).strip(), tally.stored, tally.unchanged, refused)
        if time.monotonic() - self.last_sweep > 3600:
            self.last_sweep = time.monotonic()
            sweep_spool(self.spool, SPOOL_HOURS)


def _header(data: bytes) -> dict[str, str | None]:
    import pydicom

    ds = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True,
                         specific_tags=["StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID", "StudyDate"])
    found = {}
    for keyword in ("StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID", "StudyDate"):
        value = ds.get(keyword)
        found[keyword] = None if value is None else str(value).rstrip("\0 ")
    return found


def write_durably(root: str, relative: str, data: bytes) -> bool:
    """Write `root/relative` atomically and durably; False when it already holds exactly `data` (untouched).

    Local roots: a temporary file in `root/.imaging-receive/` (the same filesystem), fsync, rename, fsync of
    the folder. Object stores (gs://): one upload, which is atomic there."""
    from imaging import fs as fsx

    target = fsx.under(root, relative)
    fs, path = fsx.filesystem(target)
    digest = hashlib.sha256(data).hexdigest()
    if not fsx.is_local(fs):
        if fs.exists(path) and fsx.sha256_url(target) == digest:
            return False
        fsx.write_bytes(target, data)
        return True
    if os.path.exists(path):
        with open(path, "rb") as handle:
            if hashlib.file_digest(handle, "sha256").hexdigest() == digest:
                return False
    base = fsx.filesystem(root)[1]
    temp_dir = os.path.join(base, TEMP_FOLDER)
    os.makedirs(temp_dir, exist_ok=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle = tempfile.NamedTemporaryFile(dir=temp_dir, prefix="in-", suffix=".part", delete=False)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        with_suppressed(os.unlink, handle.name)
        raise
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return True


def with_suppressed(function, *args) -> None:
    try:
        function(*args)
    except OSError:
        pass


def sweep_spool(spool: str, hours: float) -> int:
    """Remove spooled files older than `hours` (C-MOVE answers no retrieval took); how many."""
    return _sweep(spool, hours)


def sweep_temporary(root: str, hours: float = 1) -> int:
    """Remove temporary files a stopped receiver left (a write it never answered success for); how many."""
    from imaging import fs as fsx

    return _sweep(os.path.join(fsx.filesystem(root)[1], TEMP_FOLDER), hours)


def _sweep(folder: str, hours: float) -> int:
    from imaging import fs as fsx

    fs, base = fsx.filesystem(folder)
    if not fsx.is_local(fs) or not os.path.isdir(base):
        return 0
    cutoff, removed = time.time() - hours * 3600, 0
    for entry in os.scandir(base):
        if entry.is_file() and entry.stat().st_mtime < cutoff:
            with_suppressed(os.unlink, entry.path)
            removed += 1
    return removed


# --- the service ------------------------------------------------------------------------------------------

def server_context(config: ReceiverFile):
    import ssl

    if config.tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.tls.cert_file, config.tls.key_file)
    if config.tls.ca_file:
        context.load_verify_locations(config.tls.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def start(receiver: Receiver, host: str | None = None, port: int | None = None):
    """The receiver's association server, serving in a thread; `.shutdown()` stops it and closes its socket."""
    from pynetdicom import AE, ALL_TRANSFER_SYNTAXES, AllStoragePresentationContexts, evt
    from pynetdicom.sop_class import Verification
    from pynetdicom.transport import ThreadedAssociationServer

    config = receiver.config

    class AllowListServer(ThreadedAssociationServer):
        """Closes a connection from an address no sender calls from, before reading anything."""

        def verify_request(self, request, client_address) -> bool:
            allowed = receiver.address_allowed(client_address[0])
            if not allowed:
                LOG.warning("refused a connection: the address is not a listed sender's")
            else:
                no_delay(request)  # each C-STORE response goes out at once
            return allowed

    ae = AE(ae_title=config.ae_title)
    ae.maximum_pdu_size = 0
    ae.maximum_associations = config.max_associations
    ae.require_calling_aet = sorted({s.ae_title for s in receiver.senders}) or ["-NONE-"]
    ae.require_called_aet = True
    for context in AllStoragePresentationContexts:
        ae.add_supported_context(context.abstract_syntax, ALL_TRANSFER_SYNTAXES)
    ae.add_supported_context(Verification)
    handlers = [(evt.EVT_C_STORE, receiver.store), (evt.EVT_RELEASED, receiver.ended),
                (evt.EVT_ABORTED, receiver.ended), (evt.EVT_REJECTED, _rejected)]
    server = ae.make_server((host or config.host, config.port if port is None else port), ssl_context=server_context(config),
                            evt_handlers=handlers, server_class=AllowListServer)
    ae._servers.append(server)  # as AE.start_server does: the server's shutdown() takes itself off the list
    threading.Thread(target=server.serve_forever, name="imaging-receive", daemon=True).start()
    return server


def _rejected(event) -> None:
    LOG.warning("rejected an association from AE %s: AE titles not listed", str(event.assoc.requestor.ae_title).strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imaging-receive", description=__doc__.splitlines()[0])
    parser.add_argument("--host", help="address to listen on [platform/pacs.yaml: receiver.host]")
    parser.add_argument("--port", type=int, help="port [platform/pacs.yaml: receiver.port]")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from imaging.deid.quiet import silence_for_process

    silence_for_process()  # pydicom's and pynetdicom's warnings and records quote the request's and the file's values
    from imaging.driver.config import load_settings
    from imaging.pacs.settings import spool_root

    settings = load_settings()
    if settings.pacs is None or settings.pacs.receiver is None:
        print("imaging-receive: no receiver in platform/pacs.yaml (receiver: ae_title, port, senders)", file=sys.stderr)
        return 2
    receiver = Receiver(settings.pacs.receiver, settings.pacs, settings.landing, spool_root(settings.warehouse))
    sweep_spool(receiver.spool, SPOOL_HOURS)
    for root in (settings.landing, receiver.spool):
        sweep_temporary(root)
    server = start(receiver, args.host, args.port)
    host, port = server.server_address[:2]
    config = settings.pacs.receiver
    LOG.info("AE %s listening on %s:%d%s; %d senders; pushes land in %s, C-MOVE answers in %s", config.ae_title,
             host, port, " (TLS)" if config.tls else "", len(receiver.senders), settings.landing, receiver.spool)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    LOG.info("stopping")
    server.shutdown()  # closes the socket too
    return 0


if __name__ == "__main__":
    sys.exit(main())
