"""The service's container images, built with podman on tests/deploy's Debian bases and measured beside others'."""
