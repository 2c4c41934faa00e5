"""Bundles and the files deployments load: native, Triton module, vLLM, T4."""
