"""What kind of GPU work a pod runs, from the names the kubelet gives its pod and container, or the names
of the processes a GPU runs (a log's process table): the hint for when its log says nothing (a hint from
the log, ``LogState.workload``, wins over it). Pure."""

from __future__ import annotations

import functools
import re

from exporter.podlogs.logparse import WorkloadHint

# kind -> the words that say it, each matched as whole words of a name (separated by -, _ or .), a
# multi-word entry as consecutive words. Tried in this order, in both names: a notebook or an evaluation
# may well run a serving engine inside ("vllm-eval-7"), so the more particular kinds come first.
NAME_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("interactive", ("jupyter", "notebook", "ipykernel", "jupyter-lab")),
    ("evaluation", ("eval", "evaluation")),
    ("batch", ("batch-inference",)),  # before serving's "inference"
    (
        "training",
        ("train", "trainer", "training", "pytorchjob", "finetune", "finetuning", "torchrun", "deepspeed"),
    ),
    (
        "serving",
        (
            "vllm",
            "tgi",
            "text-generation-inference",
            "triton",
            "tritonserver",
            "text-generation-launcher",
            "text-generation-router",
            "llama-server",
            "sglang",
            "llama-cpp",
            "ollama",
            "inference",
            "serving",
            "predictor",  # KServe's pods: <service>-predictor-...
            "kserve",  # KServe's model container: kserve-container
            "torchserve",
        ),
    ),
)
_SEPARATORS = re.compile(r"[-_.]+")
_ENTRIES = tuple((kind, word, tuple(_SEPARATORS.split(word))) for kind, words in NAME_WORDS for word in words)


def _words(name: str) -> tuple[str, ...]:
    return tuple(w for w in _SEPARATORS.split(name.lower()) if w)


def _holds(words: tuple[str, ...], entry: tuple[str, ...]) -> bool:
    """Whether ``entry`` appears in ``words`` as consecutive whole words."""
    n = len(entry)
    return any(words[i : i + n] == entry for i in range(len(words) - n + 1))


@functools.lru_cache(maxsize=256)  # the same few pods are asked about every cycle
def name_hint(pod: str, container: str = "") -> WorkloadHint | None:
    """The first NAME_WORDS word found in the container's or the pod's name."""
    names = (("container", _words(container)), ("pod", _words(pod)))
    for kind, word, entry in _ENTRIES:
        for where, words in names:
            if _holds(words, entry):
                return WorkloadHint(kind, f"{where} name: {word}", "name")
    return None


_PROCESS_SEPARATORS = re.compile(r"[-_.\s/\\:]+")


def _program(command: str) -> str:
    """What names the work in a process's command: the program, and for an interpreter the module
    (``-m vllm.entrypoints.openai.api_server``) or script (``train.py``) it runs; never the other
    arguments (``--output-dir eval``). A path with spaces and no arguments (Windows' ``Program Files``,
    as a process table prints it) is taken whole."""
    words = command.split()
    if not words:
        return ""
    rest = words[1:]
    if rest and not any(w.startswith("-") for w in rest) and "\\" in command:
        return command.strip()
    if rest[:1] == ["-m"] and len(rest) > 1:
        return f"{words[0]} {rest[1]}"
    if rest and rest[0].endswith(".py"):
        return f"{words[0]} {rest[0]}"
    return words[0]


@functools.lru_cache(maxsize=256)
def process_hint(process: str) -> WorkloadHint | None:
    """The first NAME_WORDS word found in what a process runs, as a GPU's process table prints its name (a
    path, ``C:\\Program Files\\Ollama\\ollama.exe``, ``/opt/tritonserver/bin/tritonserver``) or the host
    gives its command line (``python -m vllm.entrypoints.openai.api_server ...``); None for one that says
    nothing (``python``)."""
    program = _program(process)
    words = tuple(w for w in _PROCESS_SEPARATORS.split(program.lower()) if w)
    base = re.split(r"[\\/]", program.strip())[-1][:60]
    for kind, word, entry in _ENTRIES:
        if _holds(words, entry):
            said = base if word in base.lower() else f"{base} ({word})"
            return WorkloadHint(kind, said, "process")
    return None


# Image references: [host[:port]/]path[:tag][@digest]. A host is told from a path's first component by a
# dot, a port or the name localhost, as the container tools tell them. The image's own words are the
# path's; the host (nvcr.io, ghcr.io, a mirror named after anything) and the tag (":inference",
# ":train-v2") are never read: both are chosen by whoever pushed the image, not by what it is.
IMAGE_REF_CHARS = 520  # the longest reference: a 255-character name, a 128-character tag, a sha512 digest
_IMAGE_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_IMAGE_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:]+\])(?::\d+)?"
)
_IMAGE_TAG = re.compile(r"\w[\w.-]{0,127}")
_IMAGE_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,128}")
# the first component of an image's path (its registry namespace) that says a class where the word
# alone elsewhere would not: nvcr.io/nim/<vendor>/<model> are NVIDIA's NIM inference servers
IMAGE_NAMESPACES: tuple[tuple[str, tuple[str, ...]], ...] = (("serving", ("nim",)),)


def image_path(image: str) -> tuple[str, ...] | None:
    """The repository path of an image reference, its components in order (``nvcr.io/nvidia/
    tritonserver:24.05-py3`` -> ``("nvidia", "tritonserver")``); None for what is no reference (too long,
    characters no registry allows, an empty component): such a value is not an image the runtime ran."""
    if not image or len(image) > IMAGE_REF_CHARS:
        return None
    name, _, digest = image.partition("@")
    if digest and not _IMAGE_DIGEST.fullmatch(digest):
        return None
    head, slash, last = name.rpartition("/")
    last, _, tag = last.partition(":")
    if tag and not _IMAGE_TAG.fullmatch(tag):
        return None
    parts = [*head.split("/"), last] if slash else [last]
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        if not _IMAGE_HOST.fullmatch(parts[0]):
            return None
        parts = parts[1:]
    if not all(_IMAGE_COMPONENT.fullmatch(p) for p in parts):
        return None
    return tuple(parts)


@functools.lru_cache(maxsize=256)
def image_hint(image: str) -> WorkloadHint | None:
    """The first NAME_WORDS word found in an image's repository path, as whole words of one
    component (``vllm/vllm-openai``, ``nvcr.io/nvidia/tritonserver``, ``quay.io/jupyter/scipy-notebook``);
    None for a path that says nothing (``pytorch/pytorch``, ``nvcr.io/nvidia/pytorch``: a framework's
    image runs training, serving and notebooks alike) and for what is no image reference."""
    path = image_path(image)
    if path is None:
        return None
    said = "/".join(path)[-60:]
    components = [_words(p) for p in path]
    for kind, word, entry in _ENTRIES:
        if any(_holds(words, entry) for words in components):
            return WorkloadHint(kind, f"image {said} ({word})", "image")
    for kind, namespaces in IMAGE_NAMESPACES:
        if len(path) > 1 and path[0] in namespaces:
            return WorkloadHint(kind, f"image {said} ({path[0]}/)", "image")
    return None
