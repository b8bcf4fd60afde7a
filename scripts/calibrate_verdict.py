"""Regenerate reports/verdict-calibration/: the confusion matrix of the verdict on synthetic curves.

python scripts/calibrate_verdict.py --calibrate reports/verdict-calibration --draws 12
"""

from oversmooth.experiments.calibration import main

if __name__ == "__main__":
    raise SystemExit(main())
