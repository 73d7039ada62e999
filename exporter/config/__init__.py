"""What the command line and GBE_* variables turn into: the one Settings object, passed down, and the two
ways a command ends early."""
