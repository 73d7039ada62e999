# gpu-bottleneck-exporter image. Build: docker build -t gpu-bottleneck-exporter .
# The chart runs `gpu-bottleneck-exporter serve` (the entrypoint and default command below); NVML comes
# from the driver, injected by the NVIDIA container runtime (NVIDIA_DRIVER_CAPABILITIES=utility).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock ./
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-compile -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY exporter ./exporter
RUN /opt/venv/bin/pip install --no-compile --no-deps . && /opt/venv/bin/pip check

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/venv /opt/venv
# non-root by default; the chart runs it as uid 0 (still without capabilities) only for the kubelet's
# root-only pod-resources socket
USER 65532:65532
EXPOSE 9612
ENTRYPOINT ["gpu-bottleneck-exporter"]
CMD ["serve"]
