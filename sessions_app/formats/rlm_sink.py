"""Placeholder until the LocalJSONLSink folder importer lands; detects nothing."""

NAME = "rlm_sink"


def sniff(head) -> bool:
    return False


def parse(source, problems):
    raise NotImplementedError("rlm_sink importer not written yet")
