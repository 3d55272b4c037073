# bench/plot_ops.gp — bars of each bench_ops figure's ratio to its baseline,
# with the target beside it. Usage: gnuplot -e "dir='bench/results'" bench/plot_ops.gp
if (!exists("dir")) dir = "bench/results"
set terminal pngcairo size 1200,520 font ",10" noenhanced
set output dir."/ops.png"
set title "tessera bench_ops: ratio to the same-run baseline (higher is better)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set ylabel "ratio"
set xtics rotate by -30 left
set key top left
plot dir."/ops.dat" using 2:xtic(1) title "measured", "" using 3 title "target"
