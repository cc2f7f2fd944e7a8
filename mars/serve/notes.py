"""What ``mars serve`` tells a user about itself, said once here and shown where it applies (at
start-up, in a response's ``mars.notes``). Standard library only: the command line imports it
without the ``serve`` extra."""

from __future__ import annotations

#: the synthetic upstream makes its traces up: what a first try of the proxy should know
SYNTHETIC_NOTE = (
    "the synthetic upstream makes its traces up (a reasoning model's lengths, answers and "
    "switches, no text worth reading): a prompt that holds a question of the bundled problem "
    "sets gets that problem's answer as the one its traces tend to, any other prompt a number "
    "drawn from its text; point --upstream at a real server for real answers"
)
