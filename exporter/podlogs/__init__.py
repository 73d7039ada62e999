"""What a training log says, as numbers: the pure parser the pod-log source, the progress API and the
offline ``nccl-check`` command share."""
