"""Real-component test harnesses for ``edgetune provision`` (sshd, netns, arm64 rootfs)."""
