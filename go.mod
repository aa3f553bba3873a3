module github.com/evolm/evolm

go 1.26.8

require github.com/sugarme/gotch v0.9.1
