# bench/plot_comm.gp — CPU×2 all-reduce from bench_comm: latency and bus
# bandwidth per path against the same-run baselines (single-thread memcpy,
# OpenMPI MPI_Allreduce with 2 ranks). comm.dat holds one block per series:
# 0 native, 1 butterfly, 2 ring, 3 MPI (empty when skipped), 4 memcpy.
# Usage: gnuplot -e "dir='bench/results'" bench/plot_comm.gp
if (!exists("dir")) dir = "bench/results"
set terminal pngcairo size 1300,520 font ",10" noenhanced
set output dir."/comm.png"
set multiplot layout 1,2 title "tessera bench_comm: all-reduce of F32 over 2 CPU devices, same-run baselines"
set logscale x 2
set format x "%.0b%B"
set xlabel "bytes per device"
set grid
set key top left
f = dir."/comm.dat"

set title "latency: enqueue + synchronize, median (lower is better)"
set logscale y 10
set ylabel "µs"
plot f index 0 using 1:2 with linespoints lw 2 title "native", \
     f index 1 using 1:2 with linespoints title "butterfly", \
     f index 2 using 1:2 with linespoints title "ring", \
     f index 3 using 1:2 with linespoints dt 2 title "MPI_Allreduce (OpenMPI, 2 ranks)"

set title "bus bandwidth = algbw · 2(n-1)/n (higher is better)"
unset logscale y
set yrange [0:*]
set ylabel "GB/s"
plot f index 0 using 1:3 with linespoints lw 2 title "native", \
     f index 1 using 1:3 with linespoints title "butterfly", \
     f index 2 using 1:3 with linespoints title "ring", \
     f index 3 using 1:3 with linespoints dt 2 title "MPI_Allreduce", \
     f index 4 using 1:3 with lines dt 3 lw 2 title "memcpy, 1 thread"
unset multiplot
