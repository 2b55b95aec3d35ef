"""Text of the top-level ``--help``: examples of each command, one line each."""

EXAMPLES = """examples:
  hybridsched check                          is this machine quiet enough to time on?
  hybridsched run --preset smoke -o s.h5     a study in seconds (every scheduler, tiny tensor)
  hybridsched run -s dynamic,serial -k 1,2,4 -L 200 --reps 5 -o d.h5
  hybridsched report s.h5                    tables on stdout; CSV and PNG in s_report/
  hybridsched trace s.h5 -s prolific -k 2    Gantt PNG and Perfetto JSON in s_report/
  hybridsched fit s.h5 --model usl --plot usl.png
  mpiexec -n 2 hybridsched run -s dynamic -k 1,2 -o p2.h5 && hybridsched merge s.h5 p2.h5 -o all.h5
  hybridsched plan --policy guided --tasks 20 --workers 3
"""
