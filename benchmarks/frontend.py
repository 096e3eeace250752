"""What one image request costs vLLM's API server, stage by stage, with and without vlm-fastpath.

Run inside an engine env (vLLM 0.33+) from the repository root::

    .envs/vllm-0.33.0/bin/python -m benchmarks.frontend [--rounds 7] [--json PATH]

One process, vLLM's own objects for each stage of an OpenAI chat request carrying one image
as a base64 data URL, every request a processor-cache miss (a new file each round):

- ``body``: ``json.loads`` of the request body;
- ``base64``: the data URL's payload decoded;
- ``decode``: ``ImageMediaIO.load_bytes`` (the release's loader: a ``MediaWithBytes``);
- ``parse``: Kimi: the chat renderer's ``_resolve_vision_chunk_items``; both: the processor's
  data parser;
- ``template``: Qwen: the checkpoint tokenizer's chat template rendered on the request's
  messages, then the text tokenized (as vLLM's renderer does: template, then encode); Kimi:
  the stub tokenizer of the tiny Kimi folder has no template (its prompt is three ids), so
  this stage is ~0 there;
- ``hash``: ``ProcessorInputs.get_mm_hashes`` (the processor-cache key, prefix caching's
  identifier);
- ``processor``: ``_apply_hf_processor_main`` (the HF processor call and vLLM's field checks);
- ``prompt``: what ``apply`` does after the HF call: the per-item kwargs
  (``MultiModalKwargsItems.from_hf_inputs`` with the model's field config), the prompt
  updates, and ``_maybe_apply_prompt_updates`` (placeholders expanded and checked);
- ``serialize``: vLLM's ``MsgpackEncoder`` on the processed tensors (what goes to the engine
  core; ``MiB out`` is its size);
- ``send``: those frames sent as vLLM's core client sends them (``send_multipart(copy=False)``
  over a ZMQ ``ipc://`` socket) to a stand-in engine core in another process, until it has
  received them all.

``cpu`` is the process CPU time of the stages above (threads included), ``wall`` their sum.
For Qwen an ``InputProcessor`` is built from the model's ``VllmConfig`` first, as every API
server builds one: with the plugin it records that every engine process runs from this node,
so the image rows leave compact (``vllm-qwen-compact-image-rows``); the exactness check expands
them back.

Whole requests (``--whole``, Qwen): ``InputProcessor.process_inputs`` on the decoded image (or a
decoded 32x1280x720 clip), the path that builds the ``EngineCoreRequest`` (renderer, hashing,
vLLM's processor cache as the config makes it, the HF call, prompt updates), then the request
serialized with ``MsgpackEncoder`` and sent: a cache miss (a new file) and a processor-cache hit
(the same file again). Models: Kimi K2.5 (vLLM's Kimi processing info on a tiny local
folder) and Qwen2.5-VL (``MULTIMODAL_REGISTRY.create_processor`` on a tiny checkpoint, float32
and uint8).
Before timing, each side's processed tensors are checked equal (``torch.equal``).
"""

from __future__ import annotations

import argparse
import base64
import importlib
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

STAGES = ("body", "base64", "decode", "template", "parse", "hash", "processor", "prompt",
          "serialize", "send")
# name -> (format, width, height)
IMAGES = {
    "jpeg-1280x960": ("JPEG", 1280, 960),
    "jpeg-4032x3024": ("JPEG", 4032, 3024),
    "png-2048x2048": ("PNG", 2048, 2048),
}
MODEL_ID = "org/model"


def encoded(fmt: str, width: int, height: int, seed: int) -> bytes:
    """A photograph-like image file (a new one per seed: every request a cache miss)."""
    import io

    from benchmarks.qwen_preprocess import photo_like

    out = io.BytesIO()
    photo_like(seed, width, height).save(out, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return out.getvalue()


def request_body(data: bytes, fmt: str) -> bytes:
    url = f"data:image/{fmt.lower()};base64,{base64.b64encode(data).decode()}"
    return json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "Describe the image."}]}]}).encode()


class Model:
    """One model's processor and the stage functions that differ by model."""

    def __init__(self, name: str, processor: Any, kimi: bool) -> None:
        self.name, self.processor, self.kimi = name, processor, kimi

    def prompt_ids(self, request: dict[str, Any]) -> list[int]:
        """The request's messages through the chat template, then tokenized."""
        if self.kimi:
            from fixtures.vllm_kimi_model import MEDIA_PAD_ID

            return [1, MEDIA_PAD_ID, 2]
        tokenizer = self.processor.info.get_tokenizer()
        messages = [{"role": m["role"], "content": [
            {"type": "image"} if part["type"] == "image_url" else part
            for part in m["content"]]} for m in request["messages"]]
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True)
        return tokenizer.encode(text, add_special_tokens=False)

    def parse(self, wrapper: Any) -> Any:
        if self.kimi:
            from vlm_fastpath.patches.vllm.vision_chunk_hash.renderers_chat_utils import (
                RESOLVE,
                resolution_home,
            )

            resolve = getattr(importlib.import_module(resolution_home()), RESOLVE)
            chunks, _ = resolve([(wrapper, None)], None, ["image"])
            return self.processor.data_parser.parse_mm_data({"vision_chunk": chunks})
        return self.processor.info.parse_mm_data({"image": [wrapper]})


def kimi_model(root: Path) -> Model:
    import torch
    from vllm.model_executor.models import kimi_k25

    from fixtures.vllm_kimi_model import make_model_dir
    from fixtures.vllm_requests import kimi_mm_processor

    processor = kimi_mm_processor(kimi_k25, make_model_dir(root), torch.float32)
    return Model("kimi-k2.5", processor, kimi=True)


def input_processor(model_config: Any) -> Any:
    """The API server's ``InputProcessor`` for ``model_config`` (CPU device config)."""
    from vllm.config import DeviceConfig, VllmConfig
    from vllm.v1.engine.input_processor import InputProcessor

    return InputProcessor(VllmConfig(model_config=model_config,
                                     device_config=DeviceConfig(device="cpu")))


def qwen_model(root: Path, uint8: bool) -> Model:
    from benchmarks.vllm_qwen_processor import build, checkpoint

    processor, config = build(checkpoint(root), uint8=uint8)
    model = Model(f"qwen2.5-vl-{'uint8' if uint8 else 'float32'}", processor, kimi=False)
    model.input_processor = input_processor(config)
    return model


def full_rows(processed: dict[str, Any]) -> dict[str, Any]:
    """``processed`` with compact image rows expanded (3 channels, 14x14, 2 copies)."""
    from vlm_fastpath.qwen_integration import compact

    out = dict(processed)
    rows = out.get("pixel_values")
    if rows is not None and compact.is_compact(rows, 3, 2, 14):
        out["pixel_values"] = compact.expand(rows, 3, 2, 14)
    return out


def hashes(items: Any) -> Any:
    from vllm.multimodal.processing.inputs import ProcessorInputs

    inputs = ProcessorInputs(prompt=[0], mm_data_items=items)
    params = inspect.signature(inputs.get_mm_hashes).parameters
    args = (MODEL_ID, "blake3") if "hash_algorithm" in params else (MODEL_ID,)
    return inputs.get_mm_hashes(*args)


def prompt_update(processor: Any, items: Any, processed: Any, mm_hashes: Any,
                  prompt_ids: list[int]) -> Any:
    """``apply``'s work after the HF call (vLLM 0.33/0.34 names): per-item kwargs, prompt
    updates, placeholders; returns the prompt ids and placeholders."""
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.multimodal.processing.processor import MultiModalProcessingResult

    kwargs = MultiModalKwargsItems.from_hf_inputs(
        processed, processor._get_mm_fields_config(processed, {}))
    result = MultiModalProcessingResult(
        prompt_ids=processor._postprocess_prompt(prompt_ids), kwargs=kwargs, hashes=mm_hashes,
        prompt_updates=processor._get_mm_prompt_updates(items, {}, kwargs))
    return processor._maybe_apply_prompt_updates(mm_items=items, mm_res=result)


def tensors(processed: Any) -> dict[str, Any]:
    import torch

    return {k: v for k, v in dict(processed).items() if isinstance(v, torch.Tensor)}


RECEIVER = """
import sys, zmq
ctx = zmq.Context()
pull = ctx.socket(zmq.PULL); pull.connect("ipc://" + sys.argv[1])
ack = ctx.socket(zmq.PUSH); ack.connect("ipc://" + sys.argv[1] + ".ack")
while True:
    frames = pull.recv_multipart(copy=False)
    if len(frames) == 1 and frames[0].bytes == b"stop":
        break
    ack.send(str(sum(len(f.buffer) for f in frames)).encode())
"""


class EngineCoreStandIn:
    """Receives what the API server sends, in its own process (its CPU is not counted)."""

    def __init__(self, folder: Path) -> None:
        import subprocess

        import zmq

        path = str(folder / "engine-core-input")
        self.context = zmq.Context()
        self.push = self.context.socket(zmq.PUSH)
        self.push.bind(f"ipc://{path}")
        self.ack = self.context.socket(zmq.PULL)
        self.ack.bind(f"ipc://{path}.ack")
        self.process = subprocess.Popen([sys.executable, "-c", RECEIVER, path])

    def send(self, frames: Any) -> int:
        self.push.send_multipart(frames, copy=False)
        return int(self.ack.recv())

    def close(self) -> None:
        self.push.send(b"stop")
        self.process.wait(timeout=30)
        self.context.destroy(linger=0)


Timed = tuple[dict[str, float], float, dict[str, Any], int]


def one_request(model: Model, body: bytes, engine: EngineCoreStandIn) -> Timed:
    """Each stage's wall ms, the CPU ms of all, the processed tensors, the bytes sent."""
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.v1.serial_utils import MsgpackEncoder

    wall: dict[str, float] = {}
    state: dict[str, Any] = {"body": body}
    steps: dict[str, Callable[[], Any]] = {
        "body": lambda: json.loads(state["body"]),
        "base64": lambda: base64.b64decode(
            state["body_out"]["messages"][0]["content"][0]["image_url"]["url"].split(",", 1)[1]),
        "decode": lambda: ImageMediaIO().load_bytes(state["base64_out"]),
        "template": lambda: model.prompt_ids(state["body_out"]),
        "parse": lambda: model.parse(state["decode_out"]),
        "hash": lambda: hashes(state["parse_out"]),
        "processor": lambda: model.processor._apply_hf_processor_main(state["parse_out"], {}),
        "prompt": lambda: prompt_update(model.processor, state["parse_out"],
                                        state["processor_out"], state["hash_out"],
                                        state["template_out"]),
        "serialize": lambda: MsgpackEncoder().encode(tensors(state["processor_out"])),
        "send": lambda: engine.send(state["serialize_out"]),
    }
    cpu0 = time.process_time()
    for stage in STAGES:
        t0 = time.perf_counter()
        state[f"{stage}_out"] = steps[stage]()
        wall[stage] = (time.perf_counter() - t0) * 1000.0
    cpu = (time.process_time() - cpu0) * 1000.0
    sent = state["send_out"]
    return wall, cpu, tensors(state["processor_out"]), sent


def bench(model: Model, image: str, rounds: int, engine: EngineCoreStandIn) -> dict[str, Any]:
    import vlm_fastpath
    from benchmarks.vllm_qwen_processor import same

    fmt, width, height = IMAGES[image]
    bodies = [request_body(encoded(fmt, width, height, seed), fmt)
              for seed in range(2 * rounds + 2)]
    _, _, ours, _ = one_request(model, bodies[-1], engine)  # warm-up, and the outputs compared
    vlm_fastpath.revert("vllm")
    try:
        _, _, theirs, _ = one_request(model, bodies[-1], engine)
        _, _, _, _ = one_request(model, bodies[-2], engine)  # warm-up of the plain path
    finally:
        vlm_fastpath.apply("vllm")
    exact = same(full_rows(ours), theirs)
    del ours, theirs
    walls: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
    cpus: dict[str, list[float]] = {"with": [], "without": []}
    sent: dict[str, int] = {}
    for r in range(rounds):
        for side in (("with", "without") if r % 2 == 0 else ("without", "with")):
            body = bodies[2 * r + (side == "without")]
            if side == "without":
                vlm_fastpath.revert("vllm")
            try:
                wall, cpu, _, sent[side] = one_request(model, body, engine)
            finally:
                if side == "without":
                    vlm_fastpath.apply("vllm")
            walls[side].append(wall)
            cpus[side].append(cpu)
    row: dict[str, Any] = {"model": model.name, "image": image, "exact": exact,
                           "file_mib": len(bodies[0]) * 3 / 4 / 2**20}
    for side in ("with", "without"):
        row[side] = {stage: statistics.median(w[stage] for w in walls[side])
                     for stage in STAGES}
        row[side]["wall"] = statistics.median(sum(w.values()) for w in walls[side])
        row[side]["cpu"] = statistics.median(cpus[side])
        row[side]["sent_mib"] = sent[side] / 2**20
    return row


QWEN_PROMPT = ("<|im_start|>user\n<|vision_start|><|{}_pad|><|vision_end|>Describe it.<|im_end|>\n"
               "<|im_start|>assistant\n")
WHOLE_ITEMS = ("jpeg-1280x960", "jpeg-4032x3024", "video-32x1280x720")
WHOLE_STAGES = ("request", "serialize", "send")


def whole_prompt(item: str, seed: int) -> dict[str, Any]:
    """A raw prompt with one decoded item (a new one per seed: a processor-cache miss)."""
    import numpy as np
    from vllm.multimodal.media.image import ImageMediaIO

    if item.startswith("video"):
        from benchmarks.vllm_qwen_processor import video_item

        frames = np.random.default_rng(seed).integers(0, 256, (32, 720, 1280, 3), np.uint8)
        return {"prompt": QWEN_PROMPT.format("video"),
                "multi_modal_data": {"video": video_item(frames)}}
    fmt, width, height = IMAGES[item]
    media = ImageMediaIO().load_bytes(encoded(fmt, width, height, seed))
    return {"prompt": QWEN_PROMPT.format("image"), "multi_modal_data": {"image": media}}


def whole_request(ip: Any, prompt: dict[str, Any], rid: str,
                  engine: EngineCoreStandIn) -> tuple[dict[str, float], float, int, Any]:
    """``process_inputs`` (the EngineCoreRequest), its serialization and send."""
    from vllm import SamplingParams
    from vllm.v1.serial_utils import MsgpackEncoder

    wall: dict[str, float] = {}
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    request = ip.process_inputs(rid, prompt, SamplingParams(max_tokens=16), ("generate",))
    t1 = time.perf_counter()
    frames = MsgpackEncoder().encode(request)
    t2 = time.perf_counter()
    sent = engine.send(frames)
    t3 = time.perf_counter()
    cpu = (time.process_time() - cpu0) * 1000.0
    wall.update(request=(t1 - t0) * 1e3, serialize=(t2 - t1) * 1e3, send=(t3 - t2) * 1e3)
    return wall, cpu, sent, request


def bench_whole(model: Model, item: str, rounds: int,
                engine: EngineCoreStandIn) -> dict[str, Any]:
    """Whole requests, cache miss then hit (the same item again), with and without."""
    import vlm_fastpath

    samples: dict[tuple[str, str], list[tuple[dict[str, float], float, int]]] = {}
    counter = iter(range(10**6))
    seed = 1000
    for r in range(rounds + 1):  # round 0 warms both sides up
        for side in (("with", "without") if r % 2 == 0 else ("without", "with")):
            seed += 1
            prompt = whole_prompt(item, seed)
            if side == "without":
                vlm_fastpath.revert("vllm")
            try:
                for cache in ("miss", "hit"):
                    wall, cpu, sent, _ = whole_request(model.input_processor, prompt,
                                                       f"r{next(counter)}", engine)
                    if r:
                        samples.setdefault((side, cache), []).append((wall, cpu, sent))
            finally:
                if side == "without":
                    vlm_fastpath.apply("vllm")
            del prompt
    row: dict[str, Any] = {"model": model.name, "item": item}
    for (side, cache), got in samples.items():
        entry = {stage: statistics.median(w[stage] for w, _, _ in got) for stage in WHOLE_STAGES}
        entry["wall"] = statistics.median(sum(w.values()) for w, _, _ in got)
        entry["cpu"] = statistics.median(c for _, c, _ in got)
        entry["sent_mib"] = got[-1][2] / 2**20
        row[f"{side}-{cache}"] = entry
    return row


def report_whole(rows: list[dict[str, Any]], rounds: int) -> str:
    lines = [f"## Whole requests (`InputProcessor.process_inputs`, serialize, send), medians of "
             f"{rounds} rounds (ms), from the decoded item", ""]
    head = ("| model | item | side | cache | " + " | ".join(WHOLE_STAGES)
            + " | wall | cpu | MiB out |")
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        for side in ("with", "without"):
            for cache in ("miss", "hit"):
                v = row[f"{side}-{cache}"]
                stages = " | ".join(f"{v[s]:.2f}" for s in WHOLE_STAGES)
                lines.append(f"| {row['model']} | {row['item']} | {side} | {cache} | {stages} | "
                             f"{v['wall']:.1f} | {v['cpu']:.1f} | {v['sent_mib']:.2f} |")
    return "\n".join(lines)


def report(rows: list[dict[str, Any]], rounds: int) -> str:
    import vllm

    lines = [f"# vLLM {vllm.__version__}: API-server stages per image request, medians of "
             f"{rounds} rounds (ms), load {os.getloadavg()[0]:.1f}", ""]
    head = "| model | image | side | " + " | ".join(STAGES) + " | wall | cpu | MiB out | exact |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        for side in ("with", "without"):
            v = row[side]
            stages = " | ".join(f"{v[s]:.2f}" for s in STAGES)
            lines.append(f"| {row['model']} | {row['image']} | {side} | {stages} | "
                         f"{v['wall']:.1f} | {v['cpu']:.1f} | {v['sent_mib']:.1f} | "
                         f"{'yes' if row['exact'] else 'NO'} |")
    lines.append("")
    for row in rows:
        lines.append(f"- {row['model']} {row['image']}: wall {row['without']['wall']:.1f} -> "
                     f"{row['with']['wall']:.1f} ms "
                     f"({row['without']['wall'] / row['with']['wall']:.2f}x), hash "
                     f"{row['without']['hash']:.2f} -> {row['with']['hash']:.2f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--images", default=",".join(IMAGES))
    parser.add_argument("--models", default="kimi,qwen-float32,qwen-uint8",
                        help="stage rows: comma list of kimi, qwen-float32, qwen-uint8 ('' none)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--whole", default="qwen-uint8",
                        help="Qwen models for the whole-request rows ('' for none)")
    parser.add_argument("--whole-items", default=",".join(WHOLE_ITEMS))
    args = parser.parse_args(argv)

    import vlm_fastpath
    from vlm_fastpath.patches.vllm.vision_chunk_hash.renderers_chat_utils import resolution_home

    importlib.import_module(resolution_home())  # the chat renderer, as the API server has it
    vlm_fastpath.apply("vllm")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        engine = EngineCoreStandIn(Path(tmp))
        for name in [n for n in args.models.split(",") if n]:
            model = (kimi_model(Path(tmp)) if name == "kimi"
                     else qwen_model(Path(tmp), uint8=name == "qwen-uint8"))
            for image in [i for i in args.images.split(",") if i]:
                rows.append(bench(model, image, args.rounds, engine))
                print(f"done {model.name} {image}", file=sys.stderr, flush=True)
        whole = []
        for name in [n for n in args.whole.split(",") if n]:
            model = qwen_model(Path(tmp), uint8=name == "qwen-uint8")
            for item in args.whole_items.split(","):
                whole.append(bench_whole(model, item, args.rounds, engine))
                print(f"done whole {model.name} {item}", file=sys.stderr, flush=True)
        engine.close()
    print(report(rows, args.rounds))
    if whole:
        print()
        print(report_whole(whole, args.rounds))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"stages": rows, "whole": whole}, indent=1))
    ok = all(row["exact"] for row in rows)
    if not ok:
        print("NOT EXACT: see the 'exact' column", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
