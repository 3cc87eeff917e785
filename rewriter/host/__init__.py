"""The machine the tool runs on: child processes and their supervision, process memory, the file
system (outputs whole or not at all, locks), and where the tool's data lives."""
