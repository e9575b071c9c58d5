"""`python -m evalpipe.service`: the `serve` command on its own (the process mode's child)."""

from evalpipe.service.command import serve

if __name__ == "__main__":
    serve(prog_name="python -m evalpipe.service")
