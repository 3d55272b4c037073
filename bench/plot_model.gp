# bench/plot_model.gp — decode tokens/s of each bench_model configuration
# beside its streaming-read bound. Usage: gnuplot -e "dir='bench/results'" bench/plot_model.gp
if (!exists("dir")) dir = "bench/results"
set terminal pngcairo size 1200,520 font ",10" noenhanced
set output dir."/model.png"
set title "tessera bench_model: decode tokens/s and the streaming-read bound (same run)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set ylabel "tokens/s"
set xtics rotate by -30 left
set key top right
plot dir."/model.dat" using 2:xtic(1) title "decode", "" using 3 title "bound (read GB/s / bytes per step)"
