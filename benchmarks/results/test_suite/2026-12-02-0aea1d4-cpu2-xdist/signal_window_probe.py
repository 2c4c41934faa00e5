import subprocess
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
import tempfile

from db import Database, repository
from tests.faults.test_cli_faults import CLI, HANGING, ROOT

tmp = tempfile.mkdtemp()
url = f"sqlite:///{tmp}/tf.db"
d = Database(url)
d.ensure_schema()
t0 = time.monotonic()
p = subprocess.Popen(
    [*CLI, *HANGING, "--db", url],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    start_new_session=True,
)
seen = None
while p.poll() is None:
    if seen is None:
        with d.session(readonly=True) as s:
            for job in repository.list_jobs(s):
                for st in repository.studies_for_job(s, job.id):
                    if repository.trials_for_study(s, st.id):
                        seen = time.monotonic() - t0
    time.sleep(0.05)
end = time.monotonic() - t0
print(
    f"first row seen {seen:.2f} s, exit {end:.2f} s, window {end - seen:.2f} s, rc {p.returncode}"
)
err = p.stderr.read()
print(err[-600:])
