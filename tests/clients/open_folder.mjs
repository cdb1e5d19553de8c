// Opens a modelplan deliverable folder with transformers.js (Node, onnxruntime-node), offline,
// and prints the token ids it fed and the first output it got, as JSON on stdout:
//     node open_folder.mjs FOLDER TEXTS_JSON
// The graph is at the folder's root (model.onnx), where Optimum and sentence-transformers read
// it: transformers.js is told so with `subfolder: ''` (its own default is onnx/).
import { env, AutoModel, AutoTokenizer } from '@huggingface/transformers';

const [folder, texts] = process.argv.slice(2);
env.allowRemoteModels = false;
const options = { subfolder: '', dtype: 'fp32', local_files_only: true };
const model = await AutoModel.from_pretrained(folder, options);
const tokenizer = await AutoTokenizer.from_pretrained(folder, { local_files_only: true });
const inputs = await tokenizer(JSON.parse(texts), { padding: true });
const out = await model(inputs);
const [name] = Object.keys(out);
const plain = (t) => ({ dims: t.dims, data: Array.from(t.data, Number) });
console.log(JSON.stringify({ output: name, result: plain(out[name]),
                             inputs: Object.fromEntries(Object.entries(inputs).map(
                               ([k, v]) => [k, plain(v)])) }));
