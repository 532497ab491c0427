import { conformance } from './conformance.cases.js';

conformance('shm');
