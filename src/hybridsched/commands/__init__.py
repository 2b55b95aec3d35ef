"""The subcommands: one module each (``main(args) -> exit status``), their parsers in
:mod:`.parsers`, what several share in :mod:`.common`. Only :mod:`hybridsched.cli` calls
them; exceptions become exit statuses there."""
