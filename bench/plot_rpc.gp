# bench/plot_rpc.gp — tensor set / get bandwidth of tessera RPC beside raw
# NNG streams (same transport, same sizes, same run), for tcp:// and ipc://.
# Usage: gnuplot -e "dir='bench/results'" bench/plot_rpc.gp
if (!exists("dir")) dir = "bench/results"
set terminal pngcairo size 1200,520 font ",10" noenhanced
set output dir."/rpc.png"
set multiplot layout 1,2 title "tessera bench_rpc: bandwidth against raw NNG (same run)"
set logscale x 2
set format x "%.0b%B"
set xlabel "bytes per transfer"
set ylabel "GB/s"
set yrange [0:*]
set key top left
set grid
set title "tensor set (host -> remote)"
plot dir."/rpc.dat" index 0 using 2:3 with linespoints lw 2 title "RPC tcp", \
     ""             index 0 using 2:4 with linespoints dt 2 title "raw NNG tcp", \
     ""             index 1 using 2:3 with linespoints lw 2 title "RPC ipc", \
     ""             index 1 using 2:4 with linespoints dt 2 title "raw NNG ipc"
set title "tensor get (remote -> host)"
plot dir."/rpc.dat" index 0 using 2:5 with linespoints lw 2 title "RPC tcp", \
     ""             index 0 using 2:6 with linespoints dt 2 title "raw NNG tcp", \
     ""             index 1 using 2:5 with linespoints lw 2 title "RPC ipc", \
     ""             index 1 using 2:6 with linespoints dt 2 title "raw NNG ipc"
unset multiplot
