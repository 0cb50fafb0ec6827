"""Placeholder until the flux0 importer lands (being written now); detects nothing."""

NAME = "flux0"


def sniff(head) -> bool:
    return False


def parse(source, problems):
    raise NotImplementedError("flux0 importer not written yet")
