"""A short run of the MNIST demo on real Fashion-MNIST (Debian's dataset-fashion-mnist, installed by scripts/setup.sh):
the CNN, Adam and the jitted step must actually learn."""
import os
import pytest

FASHION = "/usr/share/datasets/fashion-mnist"

@pytest.mark.skipif(not os.path.isdir(FASHION), reason="apt package dataset-fashion-mnist not installed")
def test_short_fashion_mnist_training_run_learns():
  from demos.mnist.train import train
  r = train("fashion", steps=100, batch_size=32, lr=0.002, seed=1, test_limit=1000)
  assert r["dataset"] == "fashion-mnist" and r["device"] and r["steps"] == 100
  # chance is 10%; 100 steps of 32 images reach about 70-75% with this model
  assert r["test_accuracy"] > 0.65, r
