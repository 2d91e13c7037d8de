// RUN: print examples/gelu.py | filecheck %s
// RUN: parse %s | print | filecheck %s
// One concern: float constants print with every digit repr keeps (they round-trip).

// CHECK-LABEL: "tile.kernel"() <{sym_name = "gelu"}> ({
// CHECK: value = 0.044715}>
// CHECK: value = 0.7978845608028654}>
// CHECK: value = 0.5}>
// CHECK: "tile.unary"(%{{[^)]+}}) <{fn = #unary<tanh>}>
// CHECK: value = 1.0}>

"tile.kernel"() <{sym_name = "gelu"}> ({
^bb0(%X: view<[N], f32, const>, %Y: view<[N], f32>):
  "region.parallel"() <{label = "blocks", axes = [#axis<blocks = ceildiv(N, 256)>], scope = "AUTOMATIC"}> ({
    %0 = "tile.load"(%X) <{offsets = [256 * %blocks], shape = [256], fill = 0.0}> : (view<[N], f32, const>) -> (tile<[256], f32>)
    %1 = "tile.binary"(%0, %0) <{fn = #binary<mul>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    %2 = "tile.binary"(%1, %0) <{fn = #binary<mul>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    %3 = "tile.full"() <{shape = [256], dtype = f32, value = 0.044715}> : () -> (tile<[256], f32>)
    %4 = "tile.binary"(%3, %2) <{fn = #binary<mul>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    %5 = "tile.binary"(%0, %4) <{fn = #binary<add>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    %6 = "tile.full"() <{shape = [256], dtype = f32, value = 0.7978845608028654}> : () -> (tile<[256], f32>)
    %7 = "tile.binary"(%5, %6) <{fn = #binary<mul>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    %8 = "tile.full"() <{shape = [256], dtype = f32, value = 0.5}> : () -> (tile<[256], f32>)
    %9 = "tile.binary"(%8, %0) <{fn = #binary<mul>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    %10 = "tile.unary"(%7) <{fn = #unary<tanh>}> : (tile<[256], f32>) -> (tile<[256], f32>)
    %11 = "tile.full"() <{shape = [256], dtype = f32, value = 1.0}> : () -> (tile<[256], f32>)
    %12 = "tile.binary"(%11, %10) <{fn = #binary<add>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    %13 = "tile.binary"(%9, %12) <{fn = #binary<mul>}> : (tile<[256], f32>, tile<[256], f32>) -> (tile<[256], f32>)
    "tile.store"(%Y, %13) <{offsets = [256 * %blocks]}> : (view<[N], f32>, tile<[256], f32>) -> ()
  }) : () -> ()
}) : () -> ()
