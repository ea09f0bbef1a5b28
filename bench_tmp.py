import time, sys
from botorch_sketch.benchmarks.acquisition_timing import time_acquisitions
t=time.time()
r = time_acquisitions(int(sys.argv[1]))
for k,v in r.items(): print(f"{k:>24}: {v:.4g}")
print("total", time.time()-t)
