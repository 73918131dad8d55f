// tests/onnx/ort_run.js MODEL.onnx INPUT.bin DTYPE DIMS OUTPUT.bin: runs an
// ONNX file with onnxruntime-node (an independent runtime: Microsoft's,
// not ours) on one input tensor, raw little-endian values of DTYPE (uint8,
// float32 or int64) and shape DIMS (AxBxC), and writes its output "y" as
// raw float32 to OUTPUT.bin; prints the output's dims. The module comes
// from ORT_NODE_MODULES (scripts/deps.sh installs it in .deps/).
'use strict';
const path = require('path');
const fs = require('fs');
const ort = require(path.join(process.env.ORT_NODE_MODULES || '.deps/node_modules', 'onnxruntime-node'));

async function main() {
    const [model, inFile, dtype, dimsText, outFile] = process.argv.slice(2);
    const dims = dimsText.split('x').map(Number);
    const b = fs.readFileSync(inFile);
    const raw = b.buffer.slice(b.byteOffset, b.byteOffset + b.length);
    const data = dtype === 'uint8' ? new Uint8Array(raw) : dtype === 'int64' ? new BigInt64Array(raw)
               : new Float32Array(raw);
    const session = await ort.InferenceSession.create(model, {graphOptimizationLevel: 'all', intraOpNumThreads: 1});
    const out = await session.run({input: new ort.Tensor(dtype, data, dims)});
    const y = out.y;
    if (y.type !== 'float32')
        throw new Error('output y is ' + y.type + ', not float32');
    fs.writeFileSync(outFile, Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength));
    console.log(JSON.stringify(y.dims));
}

main().catch((e) => { console.error('ort_run: ' + e.message); process.exit(1); });
