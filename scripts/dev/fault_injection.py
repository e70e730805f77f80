#!/usr/bin/env python3
"""Fault injection over a CPU smoke suite (issue 14, item 3).

Each trial starts `gpubench run --device cpu` on a few smoke-sized workloads with a journal and
--json/--csv outputs, injects one fault, then continues the journal with `gpubench run --resume`
(without the fault) and checks what must hold however the first run ended:

  * every planned job is done (status ok) exactly once in the journal, no line is torn or
    duplicated, and the header is intact;
  * no temporary file is left: no .NAME.gpubench-tmp.* beside the outputs, no gpubench-spec-*,
    gpubench-out-* or .gpubench-*.gpubench-tmp.* in the run's TMPDIR;
  * the --json output parses and holds every job once, ok;
  * the exit codes say what happened: the faulted run's code is the one its fault implies
    (-9 for a SIGKILLed parent; 1 for a job whose worker was killed, exited, hung or wrote
    garbage; 4 for an output that could not be written; 0 when the fault landed after the run
    ended), and the resume exits 0.

Faults (--kinds, default all):
  kill-parent     SIGKILL of gpubench itself at a random moment of the run
  kill-worker     SIGKILL of the running worker at a random moment (its job is "crashed")
  worker-exit     a worker that exits 3 at once (via --worker-exe)
  worker-hang     a worker that hangs past --timeout
  worker-garbage  a worker that writes garbage as its record and exits 0
  fsize           RLIMIT_FSIZE so low that the --json output cannot be written (exit 4)
  readonly        the outputs' folder on a read-only mount, made read-only after the run
                  checked it (needs mount; skipped where mounting is not allowed)
  full            the outputs on a 48 KiB tmpfs filled up while the run goes (needs mount)

Usage:
  nice -n 19 scripts/dev/fault_injection.py --gpubench build/gpubench --trials 100 \
      --summary fault-summary.json
Exit 0 when every trial held, 1 otherwise (each failure is printed with its folder, kept).
"""
import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINDS = ["kill-parent", "kill-worker", "worker-exit", "worker-hang", "worker-garbage", "fsize",
         "readonly", "full"]


def smoke_config(models):
    """The overlay tests/testing.h's smoke_configs_json writes: smoke sizes, a short window."""
    doc = {"run": {"cpu_timing": {"warmup_steps": 1, "max_warmup_steps": 1, "min_steps": 2,
                                  "min_seconds": 0}},
           "models": {}}
    for model in models:
        with open(os.path.join(REPO, "configs", "models", model + ".yaml")) as f:
            config = yaml.safe_load(f)
        smoke = config["smoke"]
        doc["models"][model] = {"cpu_batch": smoke["batch"], "model": smoke["model"]}
    return doc


def children(pid):
    """Direct children of `pid` (from /proc)."""
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def wait_gone(pids, timeout=30):
    end = time.time() + timeout
    while time.time() < end and any(alive(p) for p in pids):
        time.sleep(0.05)


def try_mount(args):
    return subprocess.run(["mount"] + args, capture_output=True).returncode == 0


class Trial:
    def __init__(self, opts, index, kind, rng):
        self.opts, self.index, self.kind, self.rng = opts, index, kind, rng
        self.dir = tempfile.mkdtemp(prefix=f"gpubench-fault-{index:03d}-{kind}-",
                                    dir=opts.workdir)
        self.tmp = os.path.join(self.dir, "tmp")  # the run's TMPDIR: its work files
        self.out = os.path.join(self.dir, "out")  # the --json and --csv outputs
        os.makedirs(self.tmp)
        os.makedirs(self.out)
        self.journal = os.path.join(self.dir, "journal.jsonl")
        self.json = os.path.join(self.out, "r.json")
        self.csv = os.path.join(self.out, "r.csv")
        self.config = os.path.join(self.dir, "smoke.json")
        with open(self.config, "w") as f:
            json.dump(smoke_config(opts.models), f)
        self.mounted = False
        self.missed = False  # the fault could not be injected (the run ended first)
        self.notes = []

    def env(self):
        env = dict(os.environ)
        env["TMPDIR"] = self.tmp
        env["GPUBENCH_JOURNAL_DIR"] = self.dir
        env["OMP_NUM_THREADS"] = "1"
        return env

    def worker_script(self, action):
        """A --worker-exe: the real worker, except for the first job's, which `action`s."""
        victim = self.opts.models[0]
        body = {"exit": "exit 3",
                "hang": "sleep 600",
                "garbage": "printf '\\377{not json' > \"$5\"; exit 0"}[action]
        path = os.path.join(self.dir, "worker.sh")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n"
                    f"case \"$(cat \"$3\")\" in '{{\"model\":\"{victim}\",'*) {body};; esac\n"
                    f"exec '{os.path.abspath(self.opts.gpubench)}' \"$@\"\n")
        os.chmod(path, 0o755)
        return path

    def command(self, extra=()):
        return [os.path.abspath(self.opts.gpubench), "run", "--device", "cpu", "--model",
                ",".join(self.opts.models), "--config", self.config, "--journal", self.journal,
                "--json", self.json, "--csv", self.csv, "--format", "none", "--quiet",
                "--timeout", str(self.opts.hang_timeout if self.kind == "worker-hang"
                                 else self.opts.timeout)] + list(extra)

    def run_faulted(self):
        kind, extra, preexec = self.kind, [], None
        if kind.startswith("worker-"):
            extra = ["--worker-exe", self.worker_script(kind.split("-", 1)[1])]
        if kind == "fsize":
            # Big enough for the journal's lines, too small for the pretty-printed --json.
            limit = self.opts.fsize_limit

            def preexec():
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if kind in ("readonly", "full"):
            size = "48k" if kind == "full" else "4m"
            if not try_mount(["-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", self.out]):
                return None  # not allowed here
            self.mounted = True
            if kind == "full":
                # Leave a few KB: the first outputs fit, a later rewrite does not.
                with open(os.path.join(self.out, "filler"), "wb") as f:
                    try:
                        f.write(b"x" * (48 * 1024 - self.opts.full_left))
                    except OSError:
                        pass
        started = time.time()
        proc = subprocess.Popen(self.command(extra), env=self.env(), preexec_fn=preexec,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        killed_at = None
        if kind == "kill-parent":
            delay = self.rng.uniform(0, self.opts.run_seconds)
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                workers = descendants(proc.pid)
                os.kill(proc.pid, signal.SIGKILL)
                killed_at = time.time() - started
                wait_gone(workers)  # PR_SET_PDEATHSIG takes the workers down with it
        elif kind == "kill-worker":
            # Workers run for most of the suite; past 85% of it the last one may have ended.
            delay = self.rng.uniform(0, 0.85 * self.opts.run_seconds)
            end = time.time() + delay
            while time.time() < end and proc.poll() is None:
                time.sleep(0.02)
            # The next worker to appear (or the running one), killed as soon as it is seen.
            while proc.poll() is None:
                workers = children(proc.pid)
                if workers:
                    try:
                        os.kill(workers[0], signal.SIGKILL)
                        killed_at = time.time() - started
                    except ProcessLookupError:
                        continue
                    break
                time.sleep(0.01)
        elif kind == "readonly":
            # After the run checked that the folder is writable: remount it read-only.
            time.sleep(self.rng.uniform(0.2, 1.5))
            if proc.poll() is not None:
                self.missed = True
                self.notes.append("the run ended before the remount")
            elif not try_mount(["-o", "remount,ro", self.out]):
                self.missed = True
                self.notes.append("remount ro failed")
        out, err = proc.communicate(timeout=self.opts.trial_timeout)
        self.first_records = self.journal_records()
        self.first = {"code": proc.returncode, "killed_at": killed_at,
                      "seconds": round(time.time() - started, 2),
                      "stderr": err.decode(errors="replace")[-2000:]}
        if self.mounted:
            # The resume writes to the same paths: give it room again.
            subprocess.run(["mount", "-o", "remount,rw", self.out], capture_output=True)
            try:
                os.remove(os.path.join(self.out, "filler"))
            except OSError:
                pass
        return self.first

    def resume(self):
        if os.path.exists(self.journal) and os.path.getsize(self.journal) == 0:
            # Killed between creating the journal and writing its header (one write): gpubench
            # says "empty journal ... delete it and start the run again"; so does this.
            self.notes.append("empty journal: deleted and started again")
            os.remove(self.journal)
        if not os.path.exists(self.journal):
            # Killed before the journal existed: nothing to resume; the run starts again.
            cmd = self.command()
        else:
            cmd = [os.path.abspath(self.opts.gpubench), "run", "--resume", self.journal,
                   "--quiet", "--format", "none"]
        proc = subprocess.run(cmd, env=self.env(), capture_output=True,
                              timeout=self.opts.trial_timeout)
        self.second = {"code": proc.returncode, "command": "run" if cmd[2] != "--resume"
                       else "resume", "stderr": proc.stderr.decode(errors="replace")[-2000:]}
        return self.second

    def journal_records(self):
        records = []
        try:
            with open(self.journal, "rb") as f:
                for line in f.read().split(b"\n")[1:]:
                    try:
                        records.append(json.loads(line).get("job", {}))
                    except ValueError:
                        pass
        except OSError:
            pass
        return records

    def expected_first_codes(self):
        k = self.kind
        if k == "kill-parent":
            return {-signal.SIGKILL, 0}  # 0: the kill came after the run ended
        if k == "kill-worker":
            return {1, 0}  # 0: no worker was running any more
        if k in ("worker-exit", "worker-hang", "worker-garbage"):
            return {1}
        if k in ("fsize", "readonly", "full"):
            return {0, 4} if self.missed else {4}
        return {0}

    def check(self):
        problems = []
        if self.first["code"] not in self.expected_first_codes():
            problems.append(f"faulted run exited {self.first['code']}, expected one of "
                            f"{sorted(self.expected_first_codes())}: {self.first['stderr']}")
        if self.kind in ("fsize", "readonly", "full") and self.first["code"] == 4:
            if "keeps every finished job" not in self.first["stderr"]:
                problems.append("exit 4 without naming the journal: " + self.first["stderr"])
        if self.kind.startswith("worker-"):
            # The faulty worker fails its own job only: the jobs after it still ran.
            victim = self.opts.models[0]
            got = {r.get("model"): r.get("status") for r in self.first_records}
            if got.get(victim) not in ("failed", "crashed", "timeout"):
                problems.append(f"{victim}'s faulty worker left {got.get(victim)!r}, expected "
                                "a failed, crashed or timeout record")
            for model in self.opts.models[1:]:
                if got.get(model) != "ok":
                    problems.append(f"{model} did not run after the faulty worker: {got}")
        if self.second["code"] != 0:
            problems.append(f"resume exited {self.second['code']}: {self.second['stderr']}")
        # The journal: a header, then whole records, nothing torn, nothing twice.
        with open(self.journal, "rb") as f:
            raw = f.read()
        if not raw.endswith(b"\n"):
            problems.append("the journal does not end with a newline (torn last line)")
        lines = raw.split(b"\n")[:-1] if raw.endswith(b"\n") else raw.split(b"\n")
        if len(set(lines)) != len(lines):
            problems.append("a journal line appears twice")
        records = []
        for n, line in enumerate(lines, 1):
            try:
                obj = json.loads(line)
            except ValueError:
                problems.append(f"journal line {n} is not JSON: {line[:120]!r}")
                continue
            if n == 1:
                if obj.get("schema") != "gpubench-journal":
                    problems.append("the journal header is damaged")
            else:
                records.append(obj.get("job", {}))
        for model in self.opts.models:
            done = [r for r in records if r.get("model") == model and r.get("status") == "ok"]
            if len(done) != 1:
                problems.append(f"{model}: {len(done)} done records in the journal, expected 1")
        # The outputs.
        try:
            with open(self.json) as f:
                doc = json.load(f)
            models = [j["model"] for j in doc["jobs"]]
            if sorted(models) != sorted(self.opts.models) or any(
                    j["status"] != "ok" for j in doc["jobs"]):
                problems.append(f"--json lists {models} with statuses "
                                f"{[j['status'] for j in doc['jobs']]}")
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"--json output unreadable: {e}")
        # No temporary file anywhere.
        left = []
        for folder in (self.out, self.tmp, self.dir):
            for name in os.listdir(folder):
                if "gpubench-tmp" in name or name.startswith(("gpubench-spec-", "gpubench-out-")):
                    left.append(os.path.join(folder, name))
        if left:
            problems.append(f"temporary files left: {left}")
        return problems

    def cleanup(self, keep):
        if self.mounted:
            subprocess.run(["umount", self.out], capture_output=True)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpubench", default=os.path.join(REPO, "build", "gpubench"))
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="comma list; kill-parent and kill-worker take most trials")
    p.add_argument("--models", default="bert-base,bert-base-mlm")
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--timeout", type=float, default=60, help="--timeout of each job (s)")
    p.add_argument("--hang-timeout", type=float, default=20,
                   help="--timeout of the worker-hang trials (s)")
    p.add_argument("--run-seconds", type=float, default=0,
                   help="window for random kill moments (default: measured)")
    p.add_argument("--fsize-limit", type=int, default=0,
                   help="RLIMIT_FSIZE bytes for the fsize trials (default: measured)")
    p.add_argument("--full-left", type=int, default=0,
                   help="bytes left on the full tmpfs (default: measured)")
    p.add_argument("--trial-timeout", type=float, default=600)
    p.add_argument("--time-cap", type=float, default=1800, help="stop starting trials after (s)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--summary", default=None, help="write the counts as JSON here")
    opts = p.parse_args()
    opts.models = opts.models.split(",")
    kinds = opts.kinds.split(",")
    rng = random.Random(opts.seed)
    began = time.time()

    # A clean run first: how long the suite takes (the window for random kills) and how big
    # its files are (the size limits that fail the outputs and not the journal).
    base = Trial(opts, 0, "clean", rng)
    t0 = time.time()
    clean = subprocess.run(base.command(), env=base.env(), capture_output=True)
    seconds = time.time() - t0
    if clean.returncode != 0:
        sys.exit(f"the clean run failed ({clean.returncode}): {clean.stderr.decode()[-2000:]}")
    journal_size = os.path.getsize(base.journal)
    json_size = os.path.getsize(base.json)
    csv_size = os.path.getsize(base.csv)
    base.cleanup(keep=False)
    opts.run_seconds = opts.run_seconds or seconds * 1.1
    if not opts.fsize_limit:
        # The limit counts for every file: above the journal, below the --json output.
        opts.fsize_limit = (journal_size + json_size) // 2 if json_size > journal_size else 0
    opts.full_left = opts.full_left or (csv_size + json_size // 2)
    print(f"clean run: {seconds:.1f} s; journal {journal_size} B, json {json_size} B, "
          f"csv {csv_size} B; kill window {opts.run_seconds:.1f} s; fsize limit "
          f"{opts.fsize_limit} B", flush=True)
    if not opts.fsize_limit and "fsize" in kinds:
        print("fsize: the --json output is not bigger than the journal; fsize trials skipped")
        kinds.remove("fsize")

    # Kill trials are most of the campaign (the 100 kill trials); the others cycle.
    schedule = []
    others = [k for k in kinds if k not in ("kill-parent", "kill-worker")]
    kill_kinds = [k for k in kinds if k in ("kill-parent", "kill-worker")]
    for i in range(opts.trials):
        if not kill_kinds:
            schedule.append(others[i % len(others)])
        elif others and i % 5 == 4:
            schedule.append(others[(i // 5) % len(others)])
        else:
            schedule.append(kill_kinds[i % len(kill_kinds)])

    counts, failures, outcomes = {}, [], {}
    for i, kind in enumerate(schedule, 1):
        if time.time() - began > opts.time_cap:
            print(f"time cap reached after {i - 1} trials", flush=True)
            break
        trial = Trial(opts, i, kind, rng)
        c = counts.setdefault(kind, {"run": 0, "held": 0, "failed": 0, "skipped": 0,
                                     "first_exit_codes": {}})
        first = trial.run_faulted()
        if first is None:
            c["skipped"] += 1
            trial.cleanup(keep=False)
            continue
        trial.resume()
        problems = trial.check()
        c["run"] += 1
        if first["killed_at"] is not None:
            c["kill_landed"] = c.get("kill_landed", 0) + 1
        code = str(first["code"])
        c["first_exit_codes"][code] = c["first_exit_codes"].get(code, 0) + 1
        status = "held" if not problems else "FAILED"
        c["held" if not problems else "failed"] += 1
        for note in trial.notes:
            c.setdefault("notes", {})[note] = c.setdefault("notes", {}).get(note, 0) + 1
        line = (f"[{i}/{len(schedule)}] {kind}: first exit {first['code']}"
                f"{'' if first['killed_at'] is None else ' (killed at %.2f s)' % first['killed_at']}"
                f", {trial.second['command']} exit {trial.second['code']}: {status}")
        print(line, flush=True)
        if problems:
            for problem in problems:
                print("   " + problem, flush=True)
            failures.append({"trial": i, "kind": kind, "dir": trial.dir, "problems": problems})
        trial.cleanup(keep=bool(problems))
    total = {"trials": sum(c["run"] for c in counts.values()),
             "held": sum(c["held"] for c in counts.values()),
             "failed": sum(c["failed"] for c in counts.values()),
             "skipped": sum(c["skipped"] for c in counts.values()),
             "kill_trials": sum(counts.get(k, {}).get("run", 0)
                                for k in ("kill-parent", "kill-worker")),
             "kill_trials_held": sum(counts.get(k, {}).get("held", 0)
                                     for k in ("kill-parent", "kill-worker")),
             "wall_seconds": round(time.time() - began, 1),
             "clean_run_seconds": round(seconds, 2),
             "models": opts.models}
    summary = {"total": total, "by_kind": counts, "failures": failures}
    print(json.dumps(total), flush=True)
    if opts.summary:
        with open(opts.summary, "w") as f:
            json.dump(summary, f, indent=2)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
