// RUN: print examples/layernorm.py | filecheck %s
// RUN: parse %s | print | filecheck %s
// One concern: a constant tile whose value is a symbolic extent (value = N) next to
// float constants, and broadcasts along either dimension.

// CHECK-LABEL: "tile.kernel"() <{sym_name = "layernorm"}> ({
// CHECK: %[[N:[^ ]+]] = "tile.full"() <{shape = [4], dtype = f32, value = N}> : () -> (tile<[4], f32>)
// CHECK: "tile.binary"(%{{[^,]+}}, %[[N]]) <{fn = #binary<div>}>
// CHECK: "tile.full"() <{shape = [4], dtype = f32, value = 1.0e-05}>
// CHECK: "tile.unary"(%{{[^)]+}}) <{fn = #unary<rsqrt>}>
// CHECK: "tile.broadcast"(%{{[^)]+}}) <{shape = [4, N], dims = [1]}> : (tile<[N], f32>) -> (tile<[4, N], f32>)

"tile.kernel"() <{sym_name = "layernorm"}> ({
^bb0(%X: view<[M, N], f32, const>, %W: view<[N], f32, const>, %Bias: view<[N], f32, const>, %Y: view<[M, N], f32>):
  "region.parallel"() <{label = "block_m", axes = [#axis<block_m = ceildiv(M, 4)>], scope = "AUTOMATIC"}> ({
    %0 = "tile.load"(%X) <{offsets = [4 * %block_m, 0], shape = [4, N], fill = 0.0}> : (view<[M, N], f32, const>) -> (tile<[4, N], f32>)
    %1 = "tile.full"() <{shape = [4], dtype = f32, value = N}> : () -> (tile<[4], f32>)
    %2 = "tile.reduce"(%0) <{fn = #reduce<sum>, axis = 1}> : (tile<[4, N], f32>) -> (tile<[4], f32>)
    %3 = "tile.binary"(%2, %1) <{fn = #binary<div>}> : (tile<[4], f32>, tile<[4], f32>) -> (tile<[4], f32>)
    %4 = "tile.broadcast"(%3) <{shape = [4, N], dims = [0]}> : (tile<[4], f32>) -> (tile<[4, N], f32>)
    %5 = "tile.binary"(%0, %4) <{fn = #binary<sub>}> : (tile<[4, N], f32>, tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %6 = "tile.binary"(%5, %5) <{fn = #binary<mul>}> : (tile<[4, N], f32>, tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %7 = "tile.reduce"(%6) <{fn = #reduce<sum>, axis = 1}> : (tile<[4, N], f32>) -> (tile<[4], f32>)
    %8 = "tile.binary"(%7, %1) <{fn = #binary<div>}> : (tile<[4], f32>, tile<[4], f32>) -> (tile<[4], f32>)
    %9 = "tile.full"() <{shape = [4], dtype = f32, value = 1.0e-05}> : () -> (tile<[4], f32>)
    %10 = "tile.binary"(%8, %9) <{fn = #binary<add>}> : (tile<[4], f32>, tile<[4], f32>) -> (tile<[4], f32>)
    %11 = "tile.unary"(%10) <{fn = #unary<rsqrt>}> : (tile<[4], f32>) -> (tile<[4], f32>)
    %12 = "tile.load"(%W) <{offsets = [0], shape = [N], fill = 0.0}> : (view<[N], f32, const>) -> (tile<[N], f32>)
    %13 = "tile.broadcast"(%12) <{shape = [4, N], dims = [1]}> : (tile<[N], f32>) -> (tile<[4, N], f32>)
    %14 = "tile.load"(%Bias) <{offsets = [0], shape = [N], fill = 0.0}> : (view<[N], f32, const>) -> (tile<[N], f32>)
    %15 = "tile.broadcast"(%14) <{shape = [4, N], dims = [1]}> : (tile<[N], f32>) -> (tile<[4, N], f32>)
    %16 = "tile.broadcast"(%11) <{shape = [4, N], dims = [0]}> : (tile<[4], f32>) -> (tile<[4, N], f32>)
    %17 = "tile.binary"(%5, %16) <{fn = #binary<mul>}> : (tile<[4, N], f32>, tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %18 = "tile.binary"(%17, %13) <{fn = #binary<mul>}> : (tile<[4, N], f32>, tile<[4, N], f32>) -> (tile<[4, N], f32>)
    %19 = "tile.binary"(%18, %15) <{fn = #binary<add>}> : (tile<[4, N], f32>, tile<[4, N], f32>) -> (tile<[4, N], f32>)
    "tile.store"(%Y, %19) <{offsets = [4 * %block_m, 0]}> : (view<[M, N], f32>, tile<[4, N], f32>) -> ()
  }) : () -> ()
}) : () -> ()
