"""Running experiments: the stages of one run (`stages`), grids of runs (`sweep`) and where the
points run (`executors`: a local process pool or a Slurm job array)."""
