module tsumugi.invalid/bench/go

go 1.21
