// OpenMP wait policy for the trainer. libgomp's worker threads spin for a while at every
// barrier by default; when the CPUs are shared (other jobs, several ranks per node) the
// spinning threads burn the time slices the working threads need, and a 2-thread CPU step
// was measured 10x slower than with OMP_WAIT_POLICY=PASSIVE (docs/PERFORMANCE.md). libgomp
// reads the variable once, when it loads, so it must be in the environment at exec time.
#ifndef TRAINSCOPE_TRAIN_OMP_H_
#define TRAINSCOPE_TRAIN_OMP_H_

namespace trainscope::train {

// When OMP_WAIT_POLICY is unset: sets it to PASSIVE and re-executes this program with the
// same arguments (/proc/self/cmdline). Returns only when the variable was already set or
// exec failed (then the run continues with the default policy). Call before any work.
void ReexecWithPassiveOmpWaitIfUnset();

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_OMP_H_
