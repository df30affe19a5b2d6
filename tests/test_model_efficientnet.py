"""EfficientNet-Lite (tinyweb.models.efficientnet) against its reference implementation, the `efficientnet_lite_pytorch`
package running the same weights in torch: the real Lite0 weights on scikit-image's cat (tests/testdata.py fetches
both), every variant's architecture (parameter names and shapes), and a widened variant's forward pass with random
weights and random batch-norm statistics."""
import os
import numpy as np
import pytest
import torch
from tinyweb import Tensor
from tinyweb.models.efficientnet import EfficientNetLite, VARIANTS, preprocess, top_k, imagenet_classes
from tinyweb.nn.state import get_state_dict
import testdata

efficientnet_lite_pytorch = pytest.importorskip("efficientnet_lite_pytorch")

def reference(variant: str, **overrides) -> torch.nn.Module:
  return efficientnet_lite_pytorch.EfficientNet.from_name(f"efficientnet-{variant}", **overrides).eval()

def cat_pixels() -> np.ndarray:
  from PIL import Image
  with Image.open(testdata.path("chelsea.png")) as im: return np.array(im.convert("RGB"))

def test_preprocess_matches_torch_resize_crop_and_normalize():
  pixels = cat_pixels()   # 451 x 300: the short side (height) becomes 224
  x = preprocess(Tensor(pixels, device="CPU"), 224).numpy()
  t = torch.from_numpy(pixels).permute(2, 0, 1)[None].float()
  h, w = 224, round(451 * 224 / 300)
  t = torch.nn.functional.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)
  left = (w - 224) // 2
  expected = ((t[:, :, :, left:left + 224] - 127.0) / 128.0).numpy()
  assert x.shape == (1, 3, 224, 224)
  np.testing.assert_allclose(x, expected, atol=2e-5)

def test_real_lite0_weights_match_the_reference_on_a_photo(model_device):
  path = testdata.path("efficientnet-lite0.pth")
  x = preprocess(Tensor(cat_pixels(), device="CPU"), 224).numpy()
  ref = efficientnet_lite_pytorch.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=path).eval()
  with torch.no_grad(): expected = ref(torch.from_numpy(x)).numpy()
  model = EfficientNetLite.load(path, device=model_device)
  assert model.variant == "lite0" and model.resolution == 224
  logits = model(Tensor(x, device=model_device)).numpy()
  assert logits.shape == (1, 1000)
  np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)   # measured 8.6e-6 (CPU), 4.8e-6 (WEBGPU) of |logits| <= 9.1
  ours = top_k(Tensor(logits[0]).softmax(-1), 5)
  theirs = [imagenet_classes()[i] for i in np.argsort(-expected[0])[:5]]
  assert [name for _, name in ours] == theirs
  assert ours[0][1] in ("Egyptian cat", "tabby", "tiger cat")   # it is a cat

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_has_the_reference_parameters(variant):
  ours = {k: v.shape for k, v in get_state_dict(EfficientNetLite(variant, num_classes=10)).items()}
  theirs = {k: tuple(v.shape) for k, v in reference(variant, num_classes=10).state_dict().items()}
  assert ours == theirs

def test_a_widened_variant_matches_the_reference_with_random_weights(tmp_path):
  """Lite2 (width 1.1: rounded channel counts; depth 1.2: extra blocks) at 64 x 64 with random weights and batch-norm
  statistics, saved by torch.save and loaded by EfficientNetLite.load."""
  torch.manual_seed(0)
  ref = reference("lite2", image_size=64)
  with torch.no_grad():
    for name, t in ref.state_dict().items():
      if name.endswith("running_mean"): t.normal_(0, 0.1)
      elif name.endswith("running_var"): t.uniform_(0.5, 2.0)
      elif name.endswith(".weight") and "_bn" in name: t.uniform_(0.5, 1.5)
      elif name.endswith(".bias"): t.normal_(0, 0.1)
  torch.save(ref.state_dict(), tmp_path / "efficientnet-lite2-random.pth")
  x = torch.randn(2, 3, 64, 64)
  with torch.no_grad(): expected = ref(x).numpy()
  model = EfficientNetLite.load(tmp_path / "efficientnet-lite2-random.pth", device="CPU")
  assert model.variant == "lite2"
  np.testing.assert_allclose(model(Tensor(x.numpy(), device="CPU")).numpy(), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())

def test_clear_errors(tmp_path):
  with pytest.raises(ValueError, match="unknown variant 'lite9'"): EfficientNetLite("lite9")
  torch.save({"x": torch.ones(1)}, tmp_path / "efficientnet-lite0-other.pth")
  with pytest.raises(ValueError, match="not an efficientnet_lite_pytorch state dict"): EfficientNetLite.load(tmp_path / "efficientnet-lite0-other.pth")
  torch.save({"x": torch.ones(1)}, tmp_path / "weights.pth")
  with pytest.raises(ValueError, match="cannot tell the variant from the file name"): EfficientNetLite.load(tmp_path / "weights.pth")
  with pytest.raises(ValueError, match=r"expected \(N, 3, H, W\) images, got shape \(1, 1, 8, 8\)"): EfficientNetLite()(Tensor.zeros(1, 1, 8, 8))
  with pytest.raises(ValueError, match=r"expected \(H, W, 3\) RGB pixels, got shape \(8, 8\)"): preprocess(Tensor.zeros(8, 8), 224)

def test_classify_demo_prints_the_references_top_class(capsys):
  from demos.classify import main
  weights = testdata.path("efficientnet-lite0.pth")
  image = testdata.path("astronaut.png")
  result = main([image, "--weights", weights, "--device", "CPU", "--top", "3"])
  from PIL import Image
  with Image.open(image) as im: pixels = np.asarray(im.convert("RGB"))
  x = preprocess(Tensor(pixels, device="CPU"), 224).numpy()
  ref = efficientnet_lite_pytorch.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()
  with torch.no_grad(): best = int(ref(torch.from_numpy(x)).argmax())
  assert result[0][1] == imagenet_classes()[best]
  assert capsys.readouterr().out.splitlines()[0].endswith(imagenet_classes()[best]) and len(result) == 3
