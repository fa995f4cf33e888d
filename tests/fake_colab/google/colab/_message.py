"""Colab's frontend channel, faked: `blocking_request("get_ipynb")` returns the live notebook.

Real Colab answers with `{"ipynb": <the notebook JSON as open in the tab>}`; here the "tab" is the
file named by the environment variable FAKE_COLAB_IPYNB.
"""

import json
import os


def blocking_request(request_type, request="", timeout_sec=5, parent=None):
    if request_type != "get_ipynb":
        raise NotImplementedError(f"fake google.colab: no {request_type!r} request")
    with open(os.environ["FAKE_COLAB_IPYNB"], encoding="utf-8") as f:
        return {"ipynb": json.load(f)}
