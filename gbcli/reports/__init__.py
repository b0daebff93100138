"""Reports of finished runs and sweeps: tables (`tables`), figures (`figures`), PNG output (`render`)."""
