"""The HDF5 study file: its format (format.py), safe files (files.py), the one-writer,
always-complete writer (writer.py), the checked reading API (reader.py) and the one
loader of a study for report, fit, simulate and --resume (studyfile.py).

``from hybridsched.store import ...`` keeps working for every name it had.
"""
from .files import (LOCK_SUFFIX, StudyLock, check_output, our_directory, replacing, same_file,
                    single_output, write_text)
from .format import (FORMAT, FORMAT_VERSION, INT32_MAX, RUN_DEFAULTS, RUN_DTYPE, conform,
                     decode, record_row)
from .reader import (MAX_TIME_S, Detail, check_ours, iter_details, keys_of, machine_n,
                     numbers_object, open_study, read_attrs, read_detail, read_runs, row_config,
                     simulated_cores, stored_keys, study_settings, study_spec)
from .outputs import OutputDir
from .studyfile import StudyFile, opened
from .writer import StudyWriter, open_new
from .tables import TableWriter, has_table, read_table


__all__ = ["FORMAT", "FORMAT_VERSION", "INT32_MAX", "LOCK_SUFFIX", "RUN_DEFAULTS", "RUN_DTYPE",
           "Detail", "StudyFile", "opened", "StudyLock", "StudyWriter", "check_ours", "check_output",
           "conform", "decode", "iter_details", "keys_of", "machine_n", "open_study", "our_directory",
           "read_attrs", "read_detail", "read_runs", "record_row", "replacing", "row_config",
           "simulated_cores", "stored_keys", "study_settings",
           "study_spec", "single_output", "same_file", "MAX_TIME_S", "numbers_object",
           "write_text", "open_new", "TableWriter", "has_table", "read_table", "OutputDir"]
