"""A stand-in for Colab's `google.colab` package, for tests that run notebooks the way Colab would.

Put `tests/fake_colab` on the kernel's `sys.path` and import `google.colab` before the first cell
(Colab imports it at kernel start, which is how notebooks detect Colab).
"""
