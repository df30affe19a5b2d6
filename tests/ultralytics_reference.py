"""ultralytics' own results for tests/test_model_yolov8.py, computed by ultralytics in its own interpreter (scripts/setup.sh
makes it: torch, torchvision and ultralytics in a venv, because torchvision's PyPI wheels are CUDA builds of the torch
beside them and do not load with the CPU torch that tinyweb's tests use).

  ULTRALYTICS_PYTHON tests/ultralytics_reference.py JOB.json OUT_DIR

JOB.json: {"random": {"seed", "size"},                   a random YOLOv8n (COCO's 80 classes) from ultralytics' yolov8n.yaml,
                                                        saved as its trainer saves: random.pt, x.npy, random.npy, names.json
           "forward": [[checkpoint, x.npy, out name]],  the checkpoint's raw head output on x: OUT_DIR/<out name>.npy
           "predict": [[checkpoint, image, conf, iou, out name]]}   YOLO(checkpoint).predict: OUT_DIR/<out name>.json
This file runs only in that interpreter; nothing of tinyweb is imported here."""
import copy, json, os, sys
os.environ.setdefault("YOLO_OFFLINE", "1")   # (never the network)
import numpy as np
import torch
from ultralytics import YOLO
from ultralytics.nn.tasks import DetectionModel

def random_yolov8n(seed: int, size: int, out: str):
  """Random weights, and batch-norm statistics and biases far from their initial values (so that each matters), saved
  as the trainer saves a checkpoint (the EMA model in float16); the expected output is that of the weights as saved."""
  torch.manual_seed(seed)
  model = DetectionModel("yolov8n.yaml", verbose=False).eval()
  with torch.no_grad():
    for name, t in model.state_dict().items():
      if name.endswith("running_mean"): t.normal_(0, 0.1)
      elif name.endswith("running_var"): t.uniform_(0.5, 2.0)
      elif name.endswith("bn.weight"): t.uniform_(0.5, 1.5)
      elif name.endswith("bias"): t.normal_(0, 0.5)
  torch.save({"epoch": 0, "model": None, "ema": copy.deepcopy(model).half(), "updates": 0}, os.path.join(out, "random.pt"))
  x = torch.rand(1, 3, size, size)
  with torch.no_grad(): expected = model.half().float()(x)[0]
  np.save(os.path.join(out, "x.npy"), x.numpy())
  np.save(os.path.join(out, "random.npy"), expected.numpy())
  with open(os.path.join(out, "names.json"), "w") as f: json.dump([model.names[i] for i in range(len(model.names))], f)

def forward(checkpoint: str, x: str) -> np.ndarray:
  model = YOLO(checkpoint).model.float().eval()   # (not fused: the checkpoint's layers as they are)
  with torch.no_grad(): return model(torch.from_numpy(np.load(x)))[0].numpy()

def predict(checkpoint: str, image: str, conf: float, iou: float) -> list:
  boxes = YOLO(checkpoint).predict(image, imgsz=640, conf=conf, iou=iou, verbose=False)[0].boxes
  return [(float(s), int(c), [float(v) for v in b]) for s, c, b in zip(boxes.conf, boxes.cls, boxes.xyxy)]

if __name__ == "__main__":
  with open(sys.argv[1]) as f: job = json.load(f)
  out = sys.argv[2]
  if "random" in job: random_yolov8n(job["random"]["seed"], job["random"]["size"], out)
  for checkpoint, x, name in job.get("forward", []): np.save(os.path.join(out, f"{name}.npy"), forward(checkpoint, x))
  for checkpoint, image, conf, iou, name in job.get("predict", []):
    with open(os.path.join(out, f"{name}.json"), "w") as f: json.dump(predict(checkpoint, image, conf, iou), f)
