"""``python -m rewrite.measure --out profile.json``: calibrate a device profile (see
`rewrite.measure.calibrate.main`)."""

from rewrite.measure.calibrate import main

main()
